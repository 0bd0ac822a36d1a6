// SessionBinder: PickPlanner's use of the session table (--session-affinity,
// doc/session-affinity.md).
//
// One plan: Begin() takes the request's session key (none when the mode is off or
// the request names no session); before a pool's Selector::Pick, Find()/Pin() narrow
// its candidates to the session's bound target when that target is among them;
// after the pick, Bind() records where the session went and returns the pick log's
// ` session=<new|hit|rebound>` field ("" when the pick was not session-bound).
// Pools map to slots: prefill and mixed picks -> kPrefill; decode -> kDecode (mode
// both only). Decode input demand, when it narrows the decode pool, runs after the
// pin: it only chooses among a session's candidates when the session has no live
// decode binding there (a first pick or a replacement).
//
// Thread-safety: none; PickPlanner calls it under the pick mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/session_affinity.h"
#include "core/types.h"
#include "router/request/request_context.h"
#include "router/metrics/session_metrics.h"

namespace infera::router {

class SessionBinder {
 public:
  // `metrics` must outlive the binder. REQUIRES: config.Validate().ok().
  SessionBinder(const core::SessionConfig& config, SessionMetrics& metrics);

  // Starts one plan of `ctx` at now_ns.
  void Begin(const RequestContext& ctx, int64_t now_ns);
  // The position in `candidates` of the session's live binding for the pool of
  // `role`, or nullopt (no session, slot off, unbound, or not a candidate).
  std::optional<size_t> Find(core::Role role, std::span<const core::TargetId> candidates);
  // core::PdPlanner's pin: shrinks `candidates` to the bound target when found.
  void Pin(core::Role role, std::vector<core::TargetId>& candidates);
  // Records the pick of the pool of `role`; the pick log's field, or "".
  std::string_view Bind(core::Role role, core::TargetId picked);
  // A worker's target left: bindings to it are replaced at their next pick.
  void RemoveTarget(core::TargetId target) { table_.RemoveTarget(target); }

  const core::SessionAffinity& table() const { return table_; }

 private:
  static core::SessionSlot SlotOf(core::Role role) {
    return role == core::Role::kDecode ? core::SessionSlot::kDecode : core::SessionSlot::kPrefill;
  }
  bool Active(core::Role role) const { return key_ && table_.Enabled(SlotOf(role)); }

  core::SessionAffinity table_;
  SessionMetrics& metrics_;
  std::optional<uint64_t> key_;  // this plan's session
  int64_t now_ns_ = 0;
};

}  // namespace infera::router
