#include "router/dispatch/mixed_dispatcher.h"

#include "router/request/api_errors.h"
#include "router/dispatch/attempt_watch.h"
#include "router/dispatch/leg_request.h"
#include "router/dispatch/relay.h"
#include "spdlog/spdlog.h"

namespace infera::router {

namespace asio = http::asio;

MixedDispatcher::MixedDispatcher(int max_attempts, int64_t request_timeout_ms,
                                 const WorkerSet& workers, PickPlanner& planner, Upstream& upstream,
                                 const core::Clock& clock, RouterMetrics& metrics,
                                 int64_t first_byte_timeout_ms)
    : max_attempts_(max_attempts),
      first_byte_timeout_ms_(first_byte_timeout_ms),
      workers_(workers),
      planner_(planner),
      upstream_(upstream),
      metrics_(metrics),
      failures_(request_timeout_ms, clock, metrics) {}

http::Awaitable<void> MixedDispatcher::Dispatch(RequestContext& ctx, http::ResponseWriter& w) {
  PlanHistory history;
  int last_status = 503;
  std::string last_message = "no worker available";
  const char* last_code = nullptr;

  for (int attempt = 0; attempt < max_attempts_; ++attempt) {
    std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
    auto plan = planner_.PlanMixed(ctx, *fleet, history);
    if (!plan.ok()) {
      if (plan.status().code() == absl::StatusCode::kUnavailable) {
        last_status = 503;
        last_message = std::string(plan.status().message());
      }
      break;
    }
    const PickLeg& leg = plan->legs[0];
    const FleetWorker& worker = *leg.worker;
    const std::string& worker_id = worker.record.worker_id;
    if (attempt > 0) metrics_.CountFailover(worker_id);

    // Lives until the answer is relayed: the client's disconnect reaches the attempt
    // through it.
    AttemptWatch watch(co_await asio::this_coro::executor, worker, ctx.cancel,
                       ctx.api.stream ? first_byte_timeout_ms_ : 0);
    UpstreamRequest request = LegRequest(ctx, leg);
    request.cancel = watch.cancel();
    auto sent = co_await upstream_.Send(std::move(request));
    if (const AttemptWatch::Fired fired = watch.Disarm();
        fired != AttemptWatch::Fired::kNone && !w.client_gone()) {
      if (sent.ok()) (*sent)->Cancel();  // the head won the race: too late all the same
      SendFailures::Judged failed = failures_.JudgeWatch(worker, fired, first_byte_timeout_ms_);
      last_status = failed.http_status;
      spdlog::warn("request {}: {}", ctx.request_id, failed.detail);
      last_message = std::move(failed.message);
      continue;  // failover: nothing reached the client yet
    }
    if (!sent.ok()) {
      SendFailures::Judged failed =
          failures_.Judge(worker, sent.status(), w.client_gone(), ctx.request_id);
      switch (failed.kind) {
        case SendFailures::Kind::kCancelled:
          ctx.End(Outcome::kCancelled, 499);
          co_return;
        case SendFailures::Kind::kTimeout:
        case SendFailures::Kind::kLocal:
          co_await SendFailures::Answer(ctx, w, std::move(failed));
          co_return;
        case SendFailures::Kind::kUnreachable:
          break;
      }
      last_status = failed.http_status;
      last_message = std::move(failed.message);
      spdlog::warn("request {}: {}", ctx.request_id, failed.detail);
      continue;  // failover: nothing reached the client yet
    }
    UpstreamResponse& response = **sent;
    if (response.status() >= 500) {
      auto body_or = co_await response.ReadAll(1 << 20);
      failures_.Report(worker, "status_5xx");
      last_status = 502;
      last_message = UpstreamStatusMessage("the worker", response.status(), body_or);
      spdlog::warn("request {}: worker {}: {}", ctx.request_id, worker_id, last_message);
      continue;
    }
    worker.health.OnSuccess();
    RelayFeedback feedback;
    feedback.guards = &plan->guards;
    co_await Relay::Run(ctx, response, worker_id, ctx.transform.get(), w, &feedback);
    if (leg.predicted_cached_tokens && feedback.usage.cached_tokens()) {
      planner_.RecordPrediction(leg, *feedback.usage.cached_tokens());
    }
    co_return;
  }

  // No worker answered before the first byte.
  if (!history.any_worker) {
    last_status = 503;
    last_message = "no workers available";
  } else if (!history.model_known) {
    last_status = 404;
    last_message = "the model '" + ctx.api.model + "' does not exist";
    last_code = "model_not_found";
  } else if (history.tried.empty()) {
    last_status = 503;
    last_message = "no worker available for model '" + ctx.api.model +
                   "' (all circuit breakers open or health checks failing)";
  }
  ctx.End(last_status == 404   ? Outcome::kClientError
          : last_status == 502 ? Outcome::kUpstreamError
                               : Outcome::kNoWorker,
          last_status);
  co_await SendError(w, ctx.kind, last_status, last_message, ctx.request_id, last_code);
}

}  // namespace infera::router
