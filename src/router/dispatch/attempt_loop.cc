#include "router/dispatch/attempt_loop.h"

#include <memory>
#include <string>
#include <utility>

#include "core/pd_planner.h"
#include "router/request/api_errors.h"

namespace infera::router {

AttemptLoop::AttemptLoop(AttemptLoopOptions options, const WorkerSet& workers,
                         PickPlanner& planner, Upstream& upstream, const core::Clock& clock,
                         RouterMetrics& metrics)
    : options_(options),
      workers_(workers),
      planner_(planner),
      metrics_(metrics),
      failures_(options.request_timeout_ms, clock, metrics),
      sender_(upstream, failures_, metrics, clock, options.first_byte_timeout_ms),
      pair_(options.pd, sender_, clock, metrics, options.seed) {}

bool AttemptLoop::ServesPd(const RequestContext& ctx, const Fleet& fleet) {
  for (const auto& wk : fleet) {
    if (wk->record.disagg_mode == discovery::DisaggMode::kMixed) continue;
    if (wk->record.model_name.empty() || wk->record.model_name == ctx.api.model) return true;
  }
  return false;
}

http::Awaitable<void> AttemptLoop::Dispatch(RequestContext& ctx, http::ResponseWriter& w) {
  std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  const bool pd = ServesPd(ctx, *fleet);  // decided once per request
  PlanHistory history;
  LegFailure failure;
  bool decode_failed = false;  // the last failed pair failed on its decode leg
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (attempt > 0) fleet = workers_.Snapshot();
    auto plan = pd ? planner_.PlanPd(ctx, *fleet, history)
                   : planner_.PlanMixed(ctx, *fleet, history);
    if (!plan.ok()) {
      const absl::StatusCode code = plan.status().code();
      if (!pd) {
        if (code == absl::StatusCode::kUnavailable) {
          failure = {503, std::string(plan.status().message())};
        }
        break;
      }
      // After a failed leg, its worker is excluded: report that failure instead.
      if (code == absl::StatusCode::kNotFound || !history.tried.empty()) break;
      const int status = code == absl::StatusCode::kUnimplemented ? 501 : 503;
      ctx.End(Outcome::kNoWorker, status);
      std::string message(plan.status().message());
      co_await SendError(w, ctx.kind, status, std::move(message), ctx.request_id);
      co_return;
    }
    if (attempt > 0) {
      // Counted on the worker that takes the failed one's place (its role's leg).
      const PickLeg& next = plan->legs.size() > 1 && decode_failed
                                ? plan->legs[1]
                                : plan->legs[0];
      metrics_.CountFailover(next.worker->record.worker_id);
    }
    // (if/else, not ?: : g++ 12 mis-compiles co_await in a conditional expression)
    LegEnd end;
    if (pd) {
      end = co_await RunPd(ctx, w, *plan, attempt, history, failure);
    } else {
      end = co_await RunMixed(ctx, w, *plan, failure);
    }
    if (end == LegEnd::kFailed && plan->legs.size() > 1) {
      decode_failed = !history.tried.empty() &&
                      history.tried.back() == plan->legs[1].worker->record.worker_id;
    }
    if (end == LegEnd::kCancelled) {
      ctx.End(Outcome::kCancelled, 499);
      co_return;
    }
    if (end == LegEnd::kAnswered) co_return;
  }
  co_await AnswerNoWorker(ctx, w, history, std::move(failure));
}

http::Awaitable<LegEnd> AttemptLoop::RunMixed(RequestContext& ctx, http::ResponseWriter& w,
                                              PickPlan& plan, LegFailure& failure) {
  const PickLeg& leg = plan.legs[0];
  RelayFeedback feedback;
  feedback.guards = &plan.guards;
  // The reported usage serves only a pick that predicted its cached tokens.
  feedback.probe_usage = leg.predicted_cached_tokens.has_value();
  // Named, not a temporary in the co_await: g++ 12 destroys such a temporary twice (the
  // cancellation's count went one too low: a use-after-free under ASan).
  const LegSendOptions options{.cancel = ctx.cancel, .feedback = &feedback};
  const LegEnd end = co_await sender_.SendAndRelay(ctx, w, leg, options, failure);
  if (end == LegEnd::kAnswered && leg.predicted_cached_tokens && feedback.usage.cached_tokens()) {
    planner_.RecordPrediction(leg, *feedback.usage.cached_tokens());
  }
  co_return end;
}

http::Awaitable<LegEnd> AttemptLoop::RunPd(RequestContext& ctx, http::ResponseWriter& w,
                                           PickPlan& plan, int attempt, PlanHistory& history,
                                           LegFailure& failure) {
  if (plan.legs.size() > 1) {
    metrics_.pd().CountPlan(core::PdPlanKindName(core::PdPlanKind::kDisaggregated));
    co_return co_await pair_.Run(ctx, w, plan, attempt, history, failure);
  }
  const PickLeg& leg = plan.legs[0];
  metrics_.pd().CountPlan(core::PdPlanKindName(
      leg.role == core::Role::kDecode ? core::PdPlanKind::kDecodeOnly : core::PdPlanKind::kMixed));
  const LegSendOptions options{.cancel = ctx.cancel};  // named: see RunMixed
  const LegEnd end = co_await sender_.SendAndRelay(ctx, w, leg, options, failure);
  if (end == LegEnd::kFailed) history.tried.push_back(leg.worker->record.worker_id);
  co_return end;
}

}  // namespace infera::router
