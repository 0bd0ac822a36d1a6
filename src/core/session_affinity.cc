#include "core/session_affinity.h"

#include <xxhash.h>

#include <algorithm>
#include <string>

#include "absl/status/status.h"

namespace infera::core {

const char* SessionModeName(SessionMode mode) {
  switch (mode) {
    case SessionMode::kOff:
      return "off";
    case SessionMode::kPrefill:
      return "prefill";
    case SessionMode::kBoth:
      return "both";
  }
  return "off";
}

absl::StatusOr<SessionMode> ParseSessionMode(std::string_view name) {
  for (SessionMode m : {SessionMode::kOff, SessionMode::kPrefill, SessionMode::kBoth}) {
    if (name == SessionModeName(m)) return m;
  }
  return absl::InvalidArgumentError("--session-affinity must be off, prefill or both (got '" +
                                    std::string(name) + "')");
}

const char* SessionSlotName(SessionSlot slot) {
  return slot == SessionSlot::kDecode ? "decode" : "prefill";
}

absl::Status SessionConfig::Validate() const {
  if (max_sessions == 0) {
    return absl::InvalidArgumentError("--session-affinity-max-sessions must be > 0");
  }
  if (ttl_ns <= 0) return absl::InvalidArgumentError("--session-affinity-ttl-s must be > 0");
  return absl::OkStatus();
}

uint64_t SessionKey(std::string_view model, std::string_view session_id) {
  std::string joined;
  joined.reserve(model.size() + 1 + session_id.size());
  joined.append(model).push_back('\0');
  joined.append(session_id);
  return XXH3_64bits_withSeed(joined.data(), joined.size(), 0);
}

SessionAffinity::SessionAffinity(const SessionConfig& config) : config_(config) {}

bool SessionAffinity::Enabled(SessionSlot slot) const {
  if (slot == SessionSlot::kDecode) return config_.mode == SessionMode::kBoth;
  return config_.mode != SessionMode::kOff;
}

uint32_t SessionAffinity::EpochOf(TargetId target) const {
  return target < epochs_.size() ? epochs_[target] : 0;
}

void SessionAffinity::Expire(int64_t now_ns) {
  while (!order_.empty() && now_ns - order_.back().last_used_ns >= config_.ttl_ns) {
    map_.erase(order_.back().key);
    order_.pop_back();
    ++stats_.expired;
  }
}

std::optional<TargetId> SessionAffinity::Bound(uint64_t key, SessionSlot slot, int64_t now_ns) {
  Expire(now_ns);
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  const Binding& b = it->second->slots[static_cast<size_t>(slot)];
  if (!Live(b)) return std::nullopt;
  return b.target;
}

bool SessionAffinity::Narrow(uint64_t key, SessionSlot slot, int64_t now_ns,
                             std::vector<TargetId>& candidates) {
  const std::optional<TargetId> bound = Bound(key, slot, now_ns);
  if (!bound) return false;
  if (std::find(candidates.begin(), candidates.end(), *bound) == candidates.end()) return false;
  candidates.assign(1, *bound);
  return true;
}

SessionOutcome SessionAffinity::Bind(uint64_t key, SessionSlot slot, TargetId picked,
                                     int64_t now_ns) {
  Expire(now_ns);
  const size_t s = static_cast<size_t>(slot);
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (map_.size() >= config_.max_sessions) {
      map_.erase(order_.back().key);
      order_.pop_back();
      ++stats_.evicted_lru;
    }
    order_.push_front(Session{.key = key, .last_used_ns = now_ns, .slots = {}});
    it = map_.emplace(key, order_.begin()).first;
  } else {
    order_.splice(order_.begin(), order_, it->second);
  }
  Session& session = *it->second;
  session.last_used_ns = now_ns;
  Binding& b = session.slots[s];
  SessionOutcome outcome = SessionOutcome::kNew;
  if (b.set) {
    outcome = Live(b) && b.target == picked ? SessionOutcome::kHit : SessionOutcome::kRebound;
  }
  b = Binding{.target = picked, .epoch = EpochOf(picked), .set = true};
  switch (outcome) {
    case SessionOutcome::kNew:
      ++stats_.binds[s];
      break;
    case SessionOutcome::kHit:
      ++stats_.hits[s];
      break;
    case SessionOutcome::kRebound:
      ++stats_.rebinds[s];
      break;
  }
  return outcome;
}

void SessionAffinity::RemoveTarget(TargetId target) {
  if (target >= epochs_.size()) epochs_.resize(static_cast<size_t>(target) + 1, 0);
  ++epochs_[target];
}

SessionStats SessionAffinity::Stats() const {
  SessionStats out = stats_;
  out.sessions = map_.size();
  return out;
}

}  // namespace infera::core
