#include "router/mixed_dispatcher.h"

#include <chrono>

#include "router/api_errors.h"
#include "router/leg_request.h"
#include "router/relay.h"
#include "spdlog/spdlog.h"

namespace infera::router {

MixedDispatcher::MixedDispatcher(int max_attempts, int64_t request_timeout_ms,
                                 const WorkerSet& workers, PickPlanner& planner, Upstream& upstream,
                                 const core::Clock& clock, RouterMetrics& metrics)
    : max_attempts_(max_attempts),
      request_timeout_ms_(request_timeout_ms),
      workers_(workers),
      planner_(planner),
      upstream_(upstream),
      clock_(clock),
      metrics_(metrics) {}

bool MixedDispatcher::LogLimiter::Allow() {
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t next = next_ns.load(std::memory_order_relaxed);
  if (now_ns < next || !next_ns.compare_exchange_strong(next, now_ns + 1'000'000'000)) {
    suppressed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void MixedDispatcher::ReportFailure(const FleetWorker& worker, const char* kind) {
  worker.health.OnFailure(clock_.NowNs());
  metrics_.CountUpstreamError(worker.record.worker_id, kind);
}

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

    auto sent = co_await upstream_.Send(LegRequest(ctx, leg));
    if (!sent.ok()) {
      const absl::StatusCode code = sent.status().code();
      if (code == absl::StatusCode::kCancelled || w.client_gone()) {
        worker.health.OnAbandoned();
        ctx.End(Outcome::kCancelled, 499);
        co_return;
      }
      if (code == absl::StatusCode::kDeadlineExceeded) {
        ReportFailure(worker, "timeout");
        ctx.End(Outcome::kTimeout, 504);
        co_await SendError(w, ctx.kind, 504,
                           "worker " + worker_id + " did not answer within " +
                               std::to_string(request_timeout_ms_) + " ms",
                           ctx.request_id);
        co_return;
      }
      if (code == absl::StatusCode::kResourceExhausted) {
        // The router's own descriptors or buffers ran out (EMFILE...): not the
        // worker's fault, and no other worker would fare better right now.
        worker.health.OnAbandoned();
        std::string kind = http::LocalErrorKind(sent.status());
        metrics_.CountLocalError(kind.empty() ? "other" : kind);
        if (local_error_log_.Allow()) {
          spdlog::warn("request {}: {} ({} more in the last second not logged)", ctx.request_id,
                       std::string(sent.status().message()),
                       local_error_log_.suppressed.exchange(0));
        }
        ctx.End(Outcome::kRouterError, 503);
        co_await SendError(w, ctx.kind, 503,
                           "the router is out of local resources (" +
                               std::string(sent.status().message()) + "); retry later",
                           ctx.request_id);
        co_return;
      }
      ReportFailure(worker, "unreachable");
      last_status = 502;
      last_message = "worker " + worker_id + " failed: " + std::string(sent.status().message());
      spdlog::warn("request {}: {}", ctx.request_id, last_message);
      continue;  // failover: nothing reached the client yet
    }
    UpstreamResponse& response = **sent;
    if (response.status() >= 500) {
      auto body_or = co_await response.ReadAll(1 << 20);
      ReportFailure(worker, "status_5xx");
      last_status = 502;
      last_message = "worker " + worker_id + " answered " + std::to_string(response.status()) +
                     (body_or.ok() ? ": " + UpstreamMessage(*body_or) : std::string());
      spdlog::warn("request {}: {}", ctx.request_id, last_message);
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
    last_message =
        "no worker available for model '" + ctx.api.model + "' (all circuit breakers open)";
  }
  ctx.End(last_status == 404   ? Outcome::kClientError
          : last_status == 502 ? Outcome::kUpstreamError
                               : Outcome::kNoWorker,
          last_status);
  co_await SendError(w, ctx.kind, last_status, last_message, ctx.request_id, last_code);
}

}  // namespace infera::router
