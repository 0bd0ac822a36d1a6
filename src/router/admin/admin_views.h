// AdminViews: the router's read-only JSON and metrics pages (doc/router.md "Endpoints").
//
//   /health                         liveness, Infera's shape: always 200
//                                   {"status":"ok","active_workers":N}, N = routable
//                                   workers (FleetWorker::Routable)
//   /ready                          readiness (Readiness): 200 {"status":"ready",...}
//                                   once the router can route, else 503 "starting"
//                                   (start-up replay) or "no_routable_workers"
//   /v1/models                      the models the fleet serves
//   /v1/workers                     records + breaker state + health checks + routable
//                                   + render_parity + active blocks,
//                                   other replicas' load and prediction error per rank
//                                   (prediction_drifting)
//   /v1/admin/cache-view/{id}       {"worker_id","dp_rank","target","block_count"}
//                                   (?dp_rank=R; absent: the worker's first rank)
//   /metrics                        RouterMetrics + fleet gauges + KV-event counters
//   /v1/admin/fleet                 the dashboard's feed: per target, totals, the
//                                   last picks and per-second series (FleetJson;
//                                   doc/operations.md "Dashboard")
// Every view reads one fleet snapshot; active blocks take the pick mutex briefly,
// cache views the index's shared lock.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "events/kv_event_source.h"
#include "events/shared_kv_index.h"
#include "router/metrics/router_metrics.h"
#include "router/plan/pick_planner.h"
#include "router/plan/readiness.h"
#include "router/plan/worker_set.h"
#include "router/sync/replica_sync.h"

namespace infera::router {

// "closed", "open" or "half_open" (/v1/workers, /v1/admin/fleet).
const char* BreakerName(const WorkerHealth& health);

class AdminViews {
 public:
  // REQUIRES: every reference outlives the views.
  AdminViews(const WorkerSet& workers, const PickPlanner& planner,
             const events::SharedKvIndex& index, const events::KvEventSource& events,
             const RouterMetrics& metrics, const Readiness& readiness, const core::Clock& clock)
      : workers_(workers),
        planner_(planner),
        index_(index),
        events_(events),
        metrics_(metrics),
        readiness_(readiness),
        clock_(clock) {}

  // --router-replica-sync: its metrics and the remote load gauges. REQUIRES: outlives
  // the views; set before serving.
  void set_replica_sync(const ReplicaSync* sync) { replica_ = sync; }
  // More families for /metrics (the NATS request transport's). REQUIRES: what `render`
  // reads outlives the views; added before serving.
  void add_metrics(std::function<void(std::string&)> render) {
    more_metrics_.push_back(std::move(render));
  }

  // Liveness: always 200 while the process serves.
  int HealthStatus() const { return 200; }
  std::string HealthJson() const;
  // Readiness: {status, json body}; 200 "ready", else 503 "starting" or
  // "no_routable_workers" (Readiness::Check).
  std::pair<int, std::string> Ready() const;
  std::string ModelsJson() const;
  std::string WorkersJson() const;
  // nullopt: no such target. `dp_rank` nullopt: the worker's first rank.
  std::optional<std::string> CacheViewJson(const std::string& worker_id,
                                           std::optional<uint32_t> dp_rank) const;
  std::string MetricsText() const;
  // GET /v1/admin/fleet: the fleet now (the /v1/workers and /metrics figures per
  // target), RouterMetrics::history()'s series and last picks.
  std::string FleetJson() const;

 private:
  // /v1/admin/fleet's targets, one object per target of `fleet`, and their sums.
  struct FleetTargets {
    nlohmann::json targets;
    size_t cached_blocks = 0, active_blocks = 0, inflight_requests = 0;
    double pending_prefill_blocks = 0;
  };
  FleetTargets TargetsJson(const Fleet& fleet, int64_t now_ns) const;
  // The KV-event counters and the time since the message count last moved.
  nlohmann::json EventsJson(int64_t now_ns) const;
  // The /metrics families of MetricsText, by subject.
  void RenderFleetSize(std::string& out, const Fleet& fleet) const;
  void RenderRemoteLoad(std::string& out, const Fleet& fleet) const;
  void RenderCacheViews(std::string& out, const Fleet& fleet) const;
  void RenderWorkerHealth(std::string& out, const Fleet& fleet) const;
  void RenderEventCounters(std::string& out) const;
  // The infera_router_prediction_* families, one series per target.
  void RenderPredictions(std::string& out, const Fleet& fleet) const;
  // infera_router_decode_demand_{tokens,requests}{target} of every decode target (the
  // series only with --decode-input-demand shadow|on).
  void RenderDemand(std::string& out, const Fleet& fleet) const;
  // infera_router_index_max_blocks{target} (the bound of each view, 0: none) and
  // infera_router_index_blocks_evicted_total{target} (doc/index.md "Bounded views").
  void RenderIndexBound(std::string& out, const Fleet& fleet) const;

  const WorkerSet& workers_;
  const PickPlanner& planner_;
  const events::SharedKvIndex& index_;
  const events::KvEventSource& events_;
  const RouterMetrics& metrics_;
  const Readiness& readiness_;
  const core::Clock& clock_;
  const ReplicaSync* replica_ = nullptr;
  // The fleet view's event idle time: the KV-event message count it last saw and
  // when that count last moved (sampled at each FleetJson).
  mutable absl::Mutex events_seen_mu_;
  mutable uint64_t events_seen_ ABSL_GUARDED_BY(events_seen_mu_) = 0;
  mutable int64_t events_moved_ns_ ABSL_GUARDED_BY(events_seen_mu_) = -1;
  std::vector<std::function<void(std::string&)>> more_metrics_;
};

}  // namespace infera::router
