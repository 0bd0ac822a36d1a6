#include "router/metrics/session_metrics.h"

#include "router/metrics/metrics.h"

namespace infera::router {
namespace {

using Slots = std::array<std::atomic<uint64_t>, core::kSessionSlots>;

void RenderSlots(std::string& out, const char* name, const char* help, const Slots& values) {
  RenderHeader(out, name, "counter", help);
  for (size_t s = 0; s < core::kSessionSlots; ++s) {
    out += std::string(name) + "{" +
           MetricLabel("slot", core::SessionSlotName(static_cast<core::SessionSlot>(s))) + "} " +
           std::to_string(values[s].load(std::memory_order_relaxed)) + "\n";
  }
}

}  // namespace

void SessionMetrics::Set(const core::SessionStats& stats) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  sessions_.store(stats.sessions, kRelaxed);
  for (size_t s = 0; s < core::kSessionSlots; ++s) {
    binds_[s].store(stats.binds[s], kRelaxed);
    hits_[s].store(stats.hits[s], kRelaxed);
    rebinds_[s].store(stats.rebinds[s], kRelaxed);
  }
  evicted_lru_.store(stats.evicted_lru, kRelaxed);
  expired_.store(stats.expired, kRelaxed);
}

void SessionMetrics::Render(std::string& out) const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  RenderHeader(out, "infera_router_session_affinity_sessions", "gauge",
               "Sessions bound to targets (--session-affinity).");
  out +=
      "infera_router_session_affinity_sessions " + std::to_string(sessions_.load(kRelaxed)) + "\n";
  RenderSlots(out, "infera_router_session_affinity_binds_total",
              "Sessions bound for the first time (or again after expiring), by slot.", binds_);
  RenderSlots(out, "infera_router_session_affinity_hits_total",
              "Picks kept on the session's bound target, by slot.", hits_);
  RenderSlots(out, "infera_router_session_affinity_rebinds_total",
              "Bound targets replaced (left, breaker open, or failed for the request), by slot.",
              rebinds_);
  const char* evictions = "infera_router_session_affinity_evictions_total";
  RenderHeader(out, evictions, "counter",
               "Sessions dropped from the table, by reason (lru: the table was full; ttl: "
               "unused for --session-affinity-ttl-s).");
  out += std::string(evictions) + "{" + MetricLabel("reason", "lru") + "} " +
         std::to_string(evicted_lru_.load(kRelaxed)) + "\n";
  out += std::string(evictions) + "{" + MetricLabel("reason", "ttl") + "} " +
         std::to_string(expired_.load(kRelaxed)) + "\n";
}

}  // namespace infera::router
