// Fleet: an immutable snapshot of the workers the router knows (doc/router-pipeline.md).
//
// WorkerSet builds a new Fleet on every discovery change and publishes it atomically;
// a request takes one snapshot and plans from it without holding a lock. A
// FleetWorker never changes after it is published, except its breaker (WorkerHealth,
// own lock), its health-check verdict (WorkerLiveness, own lock) and `retired`, set
// under the pick mutex when discovery removes the worker (the planner skips retired
// workers, so a stale snapshot never picks a target whose index id was freed).
//
// Thread-safety: immutable; shared between threads through shared_ptr<const Fleet>.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/types.h"
#include "discovery/worker_record.h"
#include "http/url.h"
#include "router/encode/render_parity.h"
#include "router/plan/worker_health.h"
#include "router/plan/worker_liveness.h"

namespace infera::router {

struct FleetWorker {
  discovery::WorkerRecord record;
  http::Endpoint endpoint;
  std::vector<core::TargetId> targets;  // one per DP rank, in rank order
  // infera_router_picks_total per role and rank (`role="...",worker_id="..."`).
  std::vector<std::atomic<uint64_t>*> picks[3];
  mutable WorkerHealth health;  // the circuit breaker (request outcomes)
  // The active health checks' verdict (HealthChecker) and the attempts waiting on it.
  mutable WorkerLiveness liveness;
  // Set (under the pick mutex) when discovery removed the worker.
  mutable std::atomic<bool> retired{false};
  // Render parity (doc/render-parity.md), written by RenderParityProber: the last
  // verdict, and whether it is `diverged`: then the router's token counts are
  // estimates for this worker (decode input demand's `input="estimated"`) and its KV
  // overlap is not credited. Unchecked (unknown) counts as exact.
  mutable std::atomic<RenderParity> render_parity{RenderParity::kUnknown};
  mutable std::atomic<bool> renders_differently{false};

  FleetWorker(discovery::WorkerRecord r, http::Endpoint ep, const BreakerOptions& breaker = {},
              const HealthCheckThresholds& checks = {})
      : record(std::move(r)), endpoint(std::move(ep)), health(breaker), liveness(checks) {}

  // Whether a pick may choose the worker now: known to discovery, passing its health
  // checks, and its breaker admits a request (/health's active_workers, /ready).
  bool Routable(int64_t now_ns) const {
    return !retired.load(std::memory_order_relaxed) && liveness.healthy() &&
           health.WouldAllow(now_ns);
  }

  // Position of `target` in `targets` (targets.size() when absent).
  size_t RankIndex(core::TargetId target) const {
    size_t i = 0;
    while (i < targets.size() && targets[i] != target) ++i;
    return i;
  }
  // The target's DP rank, for the body's data_parallel_rank; nullopt when the worker
  // has one rank (dp_size <= 1).
  std::optional<uint32_t> DpRankOf(core::TargetId target) const {
    if (record.dp_size <= 1) return std::nullopt;
    return record.dp_rank + static_cast<uint32_t>(RankIndex(target));
  }
  core::TargetKey KeyOf(size_t rank_index) const {
    return {record.worker_id, record.dp_rank + static_cast<uint32_t>(rank_index)};
  }
  // How the target is shown (pick log, metrics labels, /v1/workers, cache-view):
  // "<worker_id>#dp<r>" for every rank of a worker with dp_size > 1, else
  // TargetKey::ToString() (doc/data-parallel.md).
  std::string TargetName(size_t rank_index) const {
    return core::TargetName(KeyOf(rank_index), record.dp_size);
  }
};

using Fleet = std::vector<std::shared_ptr<const FleetWorker>>;

}  // namespace infera::router
