// MixedDispatcher: one leg per attempt, to a worker that does prefill and decode.
//
// Up to max_attempts attempts, each on a worker not tried before:
//   plan -> send -> connect failure / connection lost / 5xx answer: breaker failure,
//   failover to the next attempt (nothing reached the client yet);
//   deadline: 504, no failover (the worker may still be working);
//   client gone: the breaker probe is freed without judging the worker, 499;
//   otherwise: breaker success, Relay answers the client.
// The router's own descriptors or buffers running out (Send's ResourceExhausted:
// EMFILE, ENFILE, ENOBUFS, ENOMEM) is no failure of the worker: its breaker is not
// touched (a probe slot is freed), infera_router_local_errors_total{kind} counts it,
// the client gets 503 at once (no failover) and the log says so at most once a second.
// When no attempt got an answer: 503 (no workers / all breakers open / the selector
// refused), 404 model_not_found (no worker serves the model), or 502 with the last
// worker's failure. The attempt's PickGuards release when the attempt ends.
//
// Thread-safety: Dispatch may run on every loop at once.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/clock.h"
#include "router/dispatcher.h"
#include "router/fleet.h"
#include "router/pick_planner.h"
#include "router/router_metrics.h"
#include "router/upstream.h"
#include "router/worker_set.h"

namespace infera::router {

class MixedDispatcher final : public Dispatcher {
 public:
  // REQUIRES: every reference outlives the dispatcher; max_attempts >= 1.
  MixedDispatcher(int max_attempts, int64_t request_timeout_ms, const WorkerSet& workers,
                  PickPlanner& planner, Upstream& upstream, const core::Clock& clock,
                  RouterMetrics& metrics);

  http::Awaitable<void> Dispatch(RequestContext& ctx, http::ResponseWriter& w) override;

 private:
  // Records a failed exchange: the breaker and infera_router_upstream_errors_total.
  void ReportFailure(const FleetWorker& worker, const char* kind);

  // One log line per second at most (any loop).
  struct LogLimiter {
    std::atomic<int64_t> next_ns{0};  // steady_clock
    std::atomic<uint64_t> suppressed{0};
    bool Allow();
  };

  const int max_attempts_;
  const int64_t request_timeout_ms_;
  const WorkerSet& workers_;
  PickPlanner& planner_;
  Upstream& upstream_;
  const core::Clock& clock_;
  RouterMetrics& metrics_;
  LogLimiter local_error_log_;
};

}  // namespace infera::router
