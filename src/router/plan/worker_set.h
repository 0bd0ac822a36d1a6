// WorkerSet: the workers discovery reported, as an immutable Fleet snapshot.
//
// Add/Update/Remove come from discovery callbacks (any thread). Each worker record
// is expanded into one routing target per DP rank (dp_rank .. dp_rank + dp_size - 1);
// each target is registered with the KV event source, whose stream for rank r is on
// the record's events port + r, and shown as "<worker_id>#dp<r>" when dp_size > 1
// (doc/data-parallel.md). A removed worker's targets leave the index and the
// planner's load state (PickPlanner::Retire) before its index ids can be reused.
//
// Snapshot() is what the hot path reads: one atomic shared_ptr load, no lock.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "discovery/discovery.h"
#include "discovery/self_address.h"
#include "discovery/worker_record.h"
#include "events/kv_event_source.h"
#include "router/plan/fleet.h"

namespace infera::router {

class PickPlanner;
class RouterMetrics;

// The bound of a target's view when --max-index-blocks is not given and the worker
// record has no num_gpu_blocks (doc/index.md "Bounded views"): 16M tokens at block
// size 16, above any one engine's device KV cache, ~40 MB of index per target.
inline constexpr size_t kDefaultMaxIndexBlocks = size_t{1} << 20;

// The bound of each of the record's targets: the flag when given (0: unbounded), else
// 1.25 × the record's num_gpu_blocks (room for events in flight), else
// kDefaultMaxIndexBlocks.
size_t IndexBoundFor(const discovery::WorkerRecord& record, std::optional<size_t> flag);

struct WorkerSetOptions {
  bool kv_events = true;                   // follow each target's KV events (false: index only)
  std::string kv_events_topic;             // subscription prefix
  std::optional<size_t> max_index_blocks;  // --max-index-blocks (IndexBoundFor)
  size_t max_num_seqs = 0;                 // --worker-max-num-seqs (0: unknown)
  // Each worker's circuit breaker (its probe lease: how long an unreported half-open
  // probe holds its slot).
  BreakerOptions breaker = BreakerOptions{5, 10'000, 60'000, 610'000};
  // When active health checks flip a worker's verdict (HealthChecker).
  HealthCheckThresholds checks;
};

class WorkerSet {
 public:
  // REQUIRES: every argument outlives the WorkerSet.
  WorkerSet(WorkerSetOptions options, events::KvEventSource& events, PickPlanner& planner,
            RouterMetrics& metrics);
  WorkerSet(const WorkerSet&) = delete;
  WorkerSet& operator=(const WorkerSet&) = delete;

  // A known worker_id is left alone (Update handles changes); an unusable url, or one
  // that points at this router (set_self_address), is logged and counted
  // (infera_router_workers_refused_total{reason}) and the record is not added.
  void Add(const discovery::WorkerRecord& record) ABSL_LOCKS_EXCLUDED(mu_);
  void Update(const discovery::WorkerRecord& record) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const std::string& worker_id) ABSL_LOCKS_EXCLUDED(mu_);
  discovery::DiscoveryCallbacks Callbacks();
  // Refuses, from now on, records whose url points at this router (loop detection,
  // discovery/self_address.h): logged and counted, never added. Router::Start sets it
  // once the listen port is known.
  void set_self_address(std::shared_ptr<const discovery::SelfAddress> self) {
    self_.store(std::move(self), std::memory_order_release);
  }
  // Called with each worker Add publishes (under the set's lock: it must not call
  // back into the set), e.g. to post a probe of it. REQUIRES: set before the first Add.
  void set_on_added(std::function<void(std::shared_ptr<const FleetWorker>)> fn) {
    on_added_ = std::move(fn);
  }

  // The current fleet; never null.
  std::shared_ptr<const Fleet> Snapshot() const {
    return snapshot_.load(std::memory_order_acquire);
  }

  // Where DP rank `rank` of a record publishes, given the record's endpoint (rank 0's,
  // as the engine was configured): "tcp://host:P" -> port P + rank; "ipc://x" ->
  // "ipc://x_dp<rank>" (vLLM's offset; events::OffsetEndpointPort).
  static std::string RankEndpoint(const std::string& endpoint, uint32_t rank);

 private:
  void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerSetOptions options_;
  events::KvEventSource& events_;
  PickPlanner& planner_;
  RouterMetrics& metrics_;

  absl::Mutex mu_;  // serialises changes; never held by a request
  Fleet workers_ ABSL_GUARDED_BY(mu_);
  std::atomic<std::shared_ptr<const Fleet>> snapshot_;
  std::function<void(std::shared_ptr<const FleetWorker>)> on_added_;
  std::atomic<std::shared_ptr<const discovery::SelfAddress>> self_;
};

}  // namespace infera::router
