#include "router/dispatch/leg_send.h"

#include <chrono>
#include <utility>

#include "router/dispatch/attempt_watch.h"
#include "router/dispatch/leg_request.h"
#include "router/request/api_errors.h"
#include "spdlog/spdlog.h"

namespace infera::router {

namespace asio = http::asio;

LegSender::LegSender(Upstream& upstream, SendFailures& failures, RouterMetrics& metrics,
                     const core::Clock& clock, int64_t first_byte_timeout_ms)
    : upstream_(upstream),
      failures_(failures),
      metrics_(metrics),
      clock_(clock),
      first_byte_timeout_ms_(first_byte_timeout_ms) {}

http::Awaitable<LegEnd> LegSender::SendAndRelay(RequestContext& ctx, http::ResponseWriter& w,
                                                const PickLeg& leg, LegSendOptions o,
                                                LegFailure& failure) {
  const FleetWorker& worker = *leg.worker;
  const std::string& worker_id = worker.record.worker_id;
  const std::shared_ptr<http::Cancellation>& cancel = o.cancel;
  int64_t backoff_ms = o.backoff_ms;
  for (int t = 0; t < o.tries; ++t) {
    if (t > 0) {
      asio::steady_timer timer(co_await asio::this_coro::executor,
                               std::chrono::milliseconds(backoff_ms));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      backoff_ms *= 2;
    }
    if (cancel->cancelled() || w.client_gone()) {  // or the prefill leg failed already
      worker.health.OnAbandoned();
      co_return LegEnd::kCancelled;
    }
    UpstreamRequest up = o.body != nullptr ? LegHead(ctx, leg) : LegRequest(ctx, leg);
    if (o.body != nullptr) up.body = *o.body;
    // Lives until the answer is relayed: the client's disconnect reaches the leg
    // through it.
    AttemptWatch watch(co_await asio::this_coro::executor, worker, cancel,
                       ctx.api.stream ? first_byte_timeout_ms_ : 0);
    up.cancel = watch.cancel();
    const int64_t start_ns = clock_.NowNs();
    auto sent = co_await upstream_.Send(std::move(up));
    if (const AttemptWatch::Fired fired = watch.Disarm();
        fired != AttemptWatch::Fired::kNone && !cancel->cancelled() && !w.client_gone()) {
      if (sent.ok()) (*sent)->Cancel();  // the head won the race: too late all the same
      if (o.decode_leg) metrics_.pd().CountBootstrapFailure("decode_unreachable");
      SendFailures::Judged failed = failures_.JudgeWatch(worker, fired, first_byte_timeout_ms_);
      spdlog::warn("request {}: {}", ctx.request_id, failed.detail);
      failure = {failed.http_status, std::move(failed.message)};
      continue;  // nothing reached the client yet
    }
    if (!sent.ok()) {
      SendFailures::Judged failed = failures_.Judge(
          worker, sent.status(), cancel->cancelled() || w.client_gone(), ctx.request_id);
      switch (failed.kind) {
        case SendFailures::Kind::kCancelled:
          co_return LegEnd::kCancelled;
        case SendFailures::Kind::kTimeout:
        case SendFailures::Kind::kLocal:
          co_await SendFailures::Answer(ctx, w, std::move(failed));
          co_return LegEnd::kAnswered;
        case SendFailures::Kind::kUnreachable:
          break;
      }
      if (o.decode_leg) metrics_.pd().CountBootstrapFailure("decode_unreachable");
      failure = {failed.http_status, std::move(failed.message)};
      spdlog::warn("request {}: {}", ctx.request_id, failed.detail);
      continue;
    }
    UpstreamResponse& response = **sent;
    if (response.status() >= 500) {
      auto body_or = co_await response.ReadAll(1 << 20);
      failures_.Report(worker, "status_5xx");
      if (o.decode_leg) metrics_.pd().CountBootstrapFailure("decode_status");
      failure = {502, UpstreamStatusMessage("the worker", response.status(), body_or)};
      spdlog::warn("request {}: worker {}: {}", ctx.request_id, worker_id, failure.message);
      continue;
    }
    worker.health.OnSuccess();
    if (o.relaying != nullptr) *o.relaying = true;
    co_await Relay::Run(ctx, response, worker_id, ctx.transform.get(), w, o.feedback);
    if (leg.role == core::Role::kDecode) {
      metrics_.pd().ObserveLeg(core::Role::kDecode, worker_id, (clock_.NowNs() - start_ns) * 1e-9);
    }
    co_return LegEnd::kAnswered;
  }
  co_return LegEnd::kFailed;
}

http::Awaitable<void> AnswerNoWorker(RequestContext& ctx, http::ResponseWriter& w,
                                     const PlanHistory& history, LegFailure failure) {
  const char* code = nullptr;
  if (!history.any_worker) {
    failure = {503, "no workers available"};
  } else if (!history.model_known) {
    failure = {404, "the model '" + ctx.api.model + "' does not exist"};
    code = "model_not_found";
  } else if (history.plans == 0) {
    failure = {503, "no worker available for model '" + ctx.api.model +
                        "' (all circuit breakers open or health checks failing)"};
  }
  ctx.End(failure.status == 404   ? Outcome::kClientError
          : failure.status == 502 ? Outcome::kUpstreamError
                                  : Outcome::kNoWorker,
          failure.status);
  co_await SendError(w, ctx.kind, failure.status, failure.message, ctx.request_id, code);
}

}  // namespace infera::router
