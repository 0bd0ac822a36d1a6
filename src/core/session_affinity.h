// SessionAffinity: the session -> target bindings of --session-affinity
// (architecture §10, doc/session-affinity.md).
//
// A session (the request's `session_id`, `prompt_cache_key` or `X-Session-Id`,
// scoped by model: SessionKey) is bound to the targets that served it, one binding
// per slot:
//   kPrefill  the prefill target of a PD plan, or the target of a mixed pick
//             (modes prefill and both);
//   kDecode   the decode target of a PD plan (mode both only).
// A pick for a bound slot is narrowed to the bound target when it is among the
// candidates (Narrow); otherwise (the target left, its breaker is open, the request
// already failed on it) the pick runs over all candidates and Bind records the
// replacement. Bind after every pick says what happened: kNew (no live binding),
// kHit (the bound target again) or kRebound (another target replaced it).
//
// Bounded: at most `max_sessions` sessions, least recently used evicted first; a
// session unused for `ttl_ns` expires. A removed target's id may be reused by
// another worker: RemoveTarget makes the bindings to it stale (O(1), a per-target
// epoch), so they are replaced at their next pick, never silently inherited.
//
// Pure: time is passed in (the router's injected clock). Thread-safety: none; the
// router serialises it under the pick mutex.
//
// Example:
//   SessionAffinity table({.mode = SessionMode::kPrefill});
//   uint64_t key = SessionKey(model, session_id);
//   table.Narrow(key, SessionSlot::kPrefill, now_ns, candidates);
//   ... Selector::Pick over candidates ...
//   SessionOutcome o = table.Bind(key, SessionSlot::kPrefill, pick.picked, now_ns);
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/types.h"

namespace infera::core {

enum class SessionMode : uint8_t { kOff, kPrefill, kBoth };
// "off", "prefill", "both".
const char* SessionModeName(SessionMode mode);
// Parses a --session-affinity value (the names above).
absl::StatusOr<SessionMode> ParseSessionMode(std::string_view name);

enum class SessionSlot : uint8_t { kPrefill, kDecode };
inline constexpr size_t kSessionSlots = 2;
// "prefill", "decode" (metrics label).
const char* SessionSlotName(SessionSlot slot);

enum class SessionOutcome : uint8_t { kNew, kHit, kRebound };

struct SessionConfig {
  SessionMode mode = SessionMode::kOff;            // --session-affinity
  size_t max_sessions = 100'000;                   // --session-affinity-max-sessions
  int64_t ttl_ns = int64_t{3600} * 1'000'000'000;  // --session-affinity-ttl-s
  // InvalidArgument when max_sessions or ttl_ns is not positive.
  absl::Status Validate() const;
};

// XXH3-64 (seed 0) of `model`, a NUL byte and `session_id`: the same session id
// under two models is two sessions (their candidates differ).
uint64_t SessionKey(std::string_view model, std::string_view session_id);

struct SessionStats {
  size_t sessions = 0;                            // in the table now
  std::array<uint64_t, kSessionSlots> binds{};    // kNew outcomes, by slot
  std::array<uint64_t, kSessionSlots> hits{};     // kHit
  std::array<uint64_t, kSessionSlots> rebinds{};  // kRebound
  uint64_t evicted_lru = 0;                       // dropped for room (max_sessions)
  uint64_t expired = 0;                           // dropped after ttl_ns unused
};

class SessionAffinity {
 public:
  // REQUIRES: config.Validate().ok().
  explicit SessionAffinity(const SessionConfig& config);
  SessionAffinity(const SessionAffinity&) = delete;
  SessionAffinity& operator=(const SessionAffinity&) = delete;

  // Whether picks of `slot` consult the table (prefill: mode != off; decode: both).
  bool Enabled(SessionSlot slot) const;

  // The live binding of (key, slot): not expired at now_ns, its target not removed
  // since. Drops the expired sessions first (they are the least recently used).
  std::optional<TargetId> Bound(uint64_t key, SessionSlot slot, int64_t now_ns);
  // When the live binding's target is in `candidates`, shrinks them to it and
  // returns true; otherwise leaves them as they are.
  bool Narrow(uint64_t key, SessionSlot slot, int64_t now_ns, std::vector<TargetId>& candidates);
  // Records that the session's `slot` pick went to `picked` at now_ns (the session
  // becomes the most recently used; a new one may evict the least recently used).
  SessionOutcome Bind(uint64_t key, SessionSlot slot, TargetId picked, int64_t now_ns);

  // Bindings to `target` become stale (replaced at their next pick).
  void RemoveTarget(TargetId target);

  const SessionConfig& config() const { return config_; }
  size_t Size() const { return map_.size(); }
  SessionStats Stats() const;

 private:
  struct Binding {
    TargetId target = 0;
    uint32_t epoch = 0;  // the target's epoch when bound
    bool set = false;
  };
  struct Session {
    uint64_t key = 0;
    int64_t last_used_ns = 0;
    std::array<Binding, kSessionSlots> slots;
  };
  using Order = std::list<Session>;  // front = most recently used

  void Expire(int64_t now_ns);
  uint32_t EpochOf(TargetId target) const;
  bool Live(const Binding& b) const { return b.set && b.epoch == EpochOf(b.target); }

  SessionConfig config_;
  Order order_;
  absl::flat_hash_map<uint64_t, Order::iterator> map_;
  std::vector<uint32_t> epochs_;  // by TargetId, grown on demand
  SessionStats stats_;
};

}  // namespace infera::core
