#include "core/decode_demand.h"

namespace infera::core {

absl::StatusOr<DemandMode> ParseDemandMode(std::string_view name) {
  if (name == "off") return DemandMode::kOff;
  if (name == "shadow") return DemandMode::kShadow;
  if (name == "on") return DemandMode::kOn;
  return absl::InvalidArgumentError("decode input demand must be off, shadow or on, not '" +
                                    std::string(name) + "'");
}

const char* DemandModeName(DemandMode mode) {
  switch (mode) {
    case DemandMode::kOff:
      return "off";
    case DemandMode::kShadow:
      return "shadow";
    case DemandMode::kOn:
      return "on";
  }
  return "off";
}

DecodeDemand::Reservation& DecodeDemand::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = other.owner_;
    key_ = std::move(other.key_);
    tokens_ = other.tokens_;
    other.owner_ = nullptr;
  }
  return *this;
}

void DecodeDemand::Reservation::Release() {
  if (owner_ == nullptr) return;
  DecodeDemand* owner = owner_;
  owner_ = nullptr;
  owner->Release(key_, tokens_);
}

double DecodeDemand::Cost(const std::string& key, uint64_t demand) const {
  auto it = entries_.find(key);
  uint64_t tokens = it == entries_.end() ? 0 : it->second.tokens;
  uint64_t requests = it == entries_.end() ? 0 : it->second.requests;
  return static_cast<double>(tokens + demand) + request_weight_ * static_cast<double>(requests);
}

size_t DecodeDemand::Select(std::span<const std::string> keys, std::span<const double> loads,
                            uint64_t demand) const {
  size_t best = 0;
  double best_cost = Cost(keys[0], demand);
  for (size_t i = 1; i < keys.size(); ++i) {
    double c = Cost(keys[i], demand);
    if (c < best_cost || (c == best_cost && loads[i] < loads[best])) {
      best = i;
      best_cost = c;
    }
  }
  return best;
}

DecodeDemand::Reservation DecodeDemand::Reserve(const std::string& key, uint64_t demand) {
  Entry& e = entries_[key];
  e.tokens += demand;
  e.requests += 1;
  Reservation r;
  r.owner_ = this;
  r.key_ = std::string(key);
  r.tokens_ = demand;
  return r;
}

void DecodeDemand::Release(const std::string& key, uint64_t tokens) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;  // cannot happen: entries live while booked
  it->second.tokens -= std::min(it->second.tokens, tokens);
  if (it->second.requests > 0) it->second.requests -= 1;
  if (it->second.requests == 0) entries_.erase(it);
}

uint64_t DecodeDemand::Tokens(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.tokens;
}

uint64_t DecodeDemand::Requests(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.requests;
}

}  // namespace infera::core
