// SessionMetrics: the --session-affinity series (doc/session-affinity.md "Metrics").
//
//   infera_router_session_affinity_sessions                  sessions in the table
//   infera_router_session_affinity_binds_total{slot}         a session's first binding
//   infera_router_session_affinity_hits_total{slot}          a pick kept on the bound target
//   infera_router_session_affinity_rebinds_total{slot}       the bound target replaced
//   infera_router_session_affinity_evictions_total{reason}   lru (table full) | ttl (unused)
// slot: prefill (the prefill pick, or the pick of a mixed fleet) | decode.
// The values mirror core::SessionStats (the table counts; SessionBinder copies them
// here after each change), so a scrape never takes the pick mutex.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/session_affinity.h"

namespace infera::router {

class SessionMetrics {
 public:
  void Set(const core::SessionStats& stats);
  void Render(std::string& out) const;

 private:
  using Slots = std::array<std::atomic<uint64_t>, core::kSessionSlots>;
  std::atomic<uint64_t> sessions_{0};
  Slots binds_{}, hits_{}, rebinds_{};
  std::atomic<uint64_t> evicted_lru_{0}, expired_{0};
};

}  // namespace infera::router
