// HealthChecker: active health checks of every worker (doc/router.md "Active health
// checks").
//
// Each worker discovery reports gets its own probe loop: every `interval_ms` (start
// to start; a probe still running delays the next) it sends `GET <path>` to the
// worker's URL over the router's Upstream with a deadline of `timeout_ms` on the
// router's clock. A probe passes when any answer below 500 arrives in time (vLLM and
// SGLang answer their /health 200 when serving and 503 when their engine is dead; an
// engine without the endpoint answers 404, which still proves it serves HTTP); a 5xx,
// no answer in time, or a failed connection fail it. The router's own descriptor
// exhaustion judges nothing (outcome `local`). Outcomes go to the worker's
// WorkerLiveness (thresholds: WorkerSetOptions::checks), which takes it out of picks
// and fails over the requests waiting on it, and to /metrics and the log (a line per
// verdict change, never per probe).
//
// The loops run on the router's event loops (worker i on loop i mod threads), so a
// probe costs no thread; a loop ends when its worker leaves discovery (an updated
// record is a new worker with a new loop) or the router stops. interval_ms 0 turns
// checking off: every worker stays healthy.
//
// Thread-safety: OnAdded() from any thread (discovery); Start() once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "http/asio.h"
#include "http/io_pool.h"
#include "router/plan/fleet.h"
#include "router/dispatch/upstream.h"

namespace infera::router {

class RouterMetrics;
class WorkerSet;

struct HealthCheckOptions {
  int64_t interval_ms = 3'000;   // --health-check-interval-ms; 0: off
  int64_t timeout_ms = 3'000;    // --health-check-timeout-ms
  std::string path = "/health";  // --health-check-path
  // --health-check-failures, --health-check-successes (applied by each worker's
  // WorkerLiveness: the router copies them into WorkerSetOptions::checks).
  HealthCheckThresholds thresholds;
};

class HealthChecker {
 public:
  // Answers larger than this fail the probe (a health answer is a few bytes).
  static constexpr uint64_t kMaxAnswerBytes = 64u << 10;

  // REQUIRES: every reference outlives the checker.
  HealthChecker(HealthCheckOptions options, http::IoPool& pool, Upstream& upstream,
                const core::Clock& clock, const WorkerSet& workers, RouterMetrics& metrics);
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  // Starts the loops of the workers known now; later ones start in OnAdded.
  void Start();
  // Discovery added `worker`: start its loop (once started).
  void OnAdded(std::shared_ptr<const FleetWorker> worker);

  bool enabled() const { return options_.interval_ms > 0; }

 private:
  http::Awaitable<void> Loop(std::shared_ptr<const FleetWorker> worker);
  http::Awaitable<void> Probe(const FleetWorker& worker);
  // Starts the worker's loop unless it runs already.
  void Spawn(std::shared_ptr<const FleetWorker> worker) ABSL_LOCKS_EXCLUDED(mu_);

  const HealthCheckOptions options_;
  http::IoPool& pool_;
  Upstream& upstream_;
  const core::Clock& clock_;
  const WorkerSet& workers_;
  RouterMetrics& metrics_;
  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Workers whose loop runs (a loop holds its worker, so an address is not reused).
  absl::flat_hash_set<const FleetWorker*> looping_ ABSL_GUARDED_BY(mu_);
  unsigned next_loop_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace infera::router
