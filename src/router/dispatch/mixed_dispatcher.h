// MixedDispatcher: one leg per attempt, to a worker that does prefill and decode.
//
// Up to max_attempts attempts, each on a worker not tried before:
//   plan -> send -> connect failure / connection lost / 5xx answer: breaker failure,
//   failover to the next attempt (nothing reached the client yet);
//   deadline: 504, no failover (the worker may still be working);
//   client gone: the breaker probe is freed without judging the worker, 499;
//   no answer head within first_byte_timeout_ms (streaming requests), or the worker
//   failed its health checks while the attempt waited for its head (AttemptWatch):
//   failover (send_failure.h JudgeWatch);
//   otherwise: breaker success, Relay answers the client.
// The router's own descriptors or buffers running out is no failure of the worker:
// 503 at once, no failover (SendFailures, send_failure.h, judges every failed send).
// When no attempt got an answer: 503 (no workers / all breakers open / the selector
// refused), 404 model_not_found (no worker serves the model), or 502 with the last
// worker's failure. The attempt's PickGuards release when the attempt ends.
//
// Thread-safety: Dispatch may run on every loop at once.
#pragma once

#include <cstdint>

#include "core/clock.h"
#include "router/dispatch/dispatcher.h"
#include "router/plan/fleet.h"
#include "router/plan/pick_planner.h"
#include "router/metrics/router_metrics.h"
#include "router/dispatch/send_failure.h"
#include "router/dispatch/upstream.h"
#include "router/plan/worker_set.h"

namespace infera::router {

class MixedDispatcher final : public Dispatcher {
 public:
  // REQUIRES: every reference outlives the dispatcher; max_attempts >= 1.
  MixedDispatcher(int max_attempts, int64_t request_timeout_ms, const WorkerSet& workers,
                  PickPlanner& planner, Upstream& upstream, const core::Clock& clock,
                  RouterMetrics& metrics, int64_t first_byte_timeout_ms = 0);

  http::Awaitable<void> Dispatch(RequestContext& ctx, http::ResponseWriter& w) override;

 private:
  const int max_attempts_;
  const int64_t first_byte_timeout_ms_;  // --first-byte-timeout-ms (0: off)
  const WorkerSet& workers_;
  PickPlanner& planner_;
  Upstream& upstream_;
  RouterMetrics& metrics_;
  SendFailures failures_;
};

}  // namespace infera::router
