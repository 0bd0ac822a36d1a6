// AttemptLoop: the router's one dispatcher, mixed and PD alike (doc/router-pipeline.md).
//
// Per request it decides once whether the request takes the PD path: a prefill or
// decode worker serves its model (one fleet snapshot, reused by the first attempt).
// Then up to max_attempts attempts, each a fresh plan that excludes the workers that
// failed before (PlanHistory):
//   plan: PickPlanner::PlanMixed, or PlanPd (503 a pool is missing / 501 protocols
//     disagree, answered at once unless an earlier leg failed);
//   one leg (mixed; PD's decode-only or mixed plans): LegSender::SendAndRelay (the one
//     copy of send, 5xx, watch and relay; leg_send.h), with the relay's feedback to
//     the planner on the mixed path;
//   two legs: PdPair::Run (dispatch/pd/pd_pair.h), the protocol's order;
//   kFailed: failover to the next attempt (nothing reached the client yet; counted on
//     the worker that takes the failed one's place); kCancelled: 499.
// When no attempt answered: AnswerNoWorker (leg_send.h). The attempt's PickGuards
// release when the attempt ends.
//
// Thread-safety: Dispatch may run on every loop at once.
#pragma once

#include <cstdint>

#include "core/clock.h"
#include "router/dispatch/dispatcher.h"
#include "router/dispatch/leg_send.h"
#include "router/dispatch/pd/options.h"
#include "router/dispatch/pd/pd_pair.h"
#include "router/dispatch/send_failure.h"
#include "router/dispatch/upstream.h"
#include "router/metrics/router_metrics.h"
#include "router/plan/fleet.h"
#include "router/plan/pick_planner.h"
#include "router/plan/worker_set.h"

namespace infera::router {

struct AttemptLoopOptions {
  int max_attempts = 3;            // REQUIRES: >= 1
  int64_t request_timeout_ms = 0;
  int64_t first_byte_timeout_ms = 0;  // --first-byte-timeout-ms (0: off)
  PdOptions pd;
  uint64_t seed = 0;  // PD's per-request randomness (bootstrap rooms)
};

class AttemptLoop final : public Dispatcher {
 public:
  // REQUIRES: every reference outlives the loop.
  AttemptLoop(AttemptLoopOptions options, const WorkerSet& workers, PickPlanner& planner,
              Upstream& upstream, const core::Clock& clock, RouterMetrics& metrics);

  http::Awaitable<void> Dispatch(RequestContext& ctx, http::ResponseWriter& w) override;

 private:
  // True when a prefill or decode worker serves ctx's model.
  static bool ServesPd(const RequestContext& ctx, const Fleet& fleet);
  // One mixed attempt: the plan's one leg, with the relay's feedback to the planner.
  http::Awaitable<LegEnd> RunMixed(RequestContext& ctx, http::ResponseWriter& w, PickPlan& plan,
                                   LegFailure& failure);
  // One PD attempt: a single leg or a pair.
  http::Awaitable<LegEnd> RunPd(RequestContext& ctx, http::ResponseWriter& w, PickPlan& plan,
                                int attempt, PlanHistory& history, LegFailure& failure);

  const AttemptLoopOptions options_;
  const WorkerSet& workers_;
  PickPlanner& planner_;
  RouterMetrics& metrics_;
  SendFailures failures_;
  LegSender sender_;
  PdPair pair_;
};

}  // namespace infera::router
