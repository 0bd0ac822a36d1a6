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
    entry_ = std::move(other.entry_);
    key_ = std::move(other.key_);
    tokens_ = other.tokens_;
    other.owner_ = nullptr;
    other.entry_.reset();
  }
  return *this;
}

void DecodeDemand::Reservation::Release() {
  if (owner_ == nullptr) return;
  DecodeDemand* owner = owner_;
  owner_ = nullptr;
  owner->Release(*this);
}

double DecodeDemand::Cost(const std::string& key, uint64_t demand) const {
  auto it = entries_.find(key);
  uint64_t tokens = it == entries_.end() ? 0 : it->second->tokens;
  uint64_t requests = it == entries_.end() ? 0 : it->second->requests;
  if (auto r = remote_.find(key); r != remote_.end()) {
    tokens += r->second.tokens;
    requests += r->second.requests;
  }
  return static_cast<double>(tokens + demand) + request_weight_ * static_cast<double>(requests);
}

size_t DecodeDemand::Select(std::span<const std::string> keys, std::span<const double> loads,
                            uint64_t demand) const {
  size_t best = 0;
  double best_cost = Cost(keys[0], demand);
  for (size_t i = 1; i < keys.size(); ++i) {
    const double c = Cost(keys[i], demand);
    if (c < best_cost || (c == best_cost && loads[i] < loads[best])) {
      best = i;
      best_cost = c;
    }
  }
  return best;
}

DemandDecision DecodeDemand::Decide(DemandMode mode, std::span<const std::string> keys,
                                    std::span<const double> loads, uint64_t demand,
                                    size_t original) const {
  DemandDecision d;
  d.original = original;
  d.costs.reserve(keys.size());
  for (const std::string& k : keys) d.costs.push_back(Cost(k, demand));
  d.suggestion = Select(keys, loads, demand);
  d.chosen = mode == DemandMode::kOn ? d.suggestion : d.original;
  return d;
}

DecodeDemand::Reservation DecodeDemand::Reserve(const std::string& key, uint64_t demand) {
  std::shared_ptr<Entry>& e = entries_[key];
  if (e == nullptr) e = std::make_shared<Entry>();
  e->tokens += demand;
  e->requests += 1;
  ++live_;
  Reservation r;
  r.owner_ = this;
  r.entry_ = e;
  r.key_ = key;
  r.tokens_ = demand;
  return r;
}

void DecodeDemand::Forget(const std::string& key) { entries_.erase(key); }

void DecodeDemand::Release(Reservation& r) {
  std::shared_ptr<Entry> e = std::move(r.entry_);
  r.entry_.reset();
  if (live_ > 0) --live_;
  if (e == nullptr) return;
  e->tokens -= std::min(e->tokens, r.tokens_);
  if (e->requests > 0) e->requests -= 1;
  if (e->requests > 0) return;
  // Nothing booked: drop the entry, unless it is a detached one (or the key's entry
  // is another, recreated one): then only its last holder goes.
  auto it = entries_.find(r.key_);
  if (it != entries_.end() && it->second == e) entries_.erase(it);
}

uint64_t DecodeDemand::Tokens(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second->tokens;
}

uint64_t DecodeDemand::Requests(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second->requests;
}

void DecodeDemand::SetRemote(const std::string& key, uint64_t tokens, uint64_t requests) {
  if (tokens == 0 && requests == 0) {
    remote_.erase(key);
  } else {
    remote_[key] = Entry{tokens, requests};
  }
}

uint64_t DecodeDemand::RemoteTokens(const std::string& key) const {
  auto it = remote_.find(key);
  return it == remote_.end() ? 0 : it->second.tokens;
}

uint64_t DecodeDemand::RemoteRequests(const std::string& key) const {
  auto it = remote_.find(key);
  return it == remote_.end() ? 0 : it->second.requests;
}

}  // namespace infera::core
