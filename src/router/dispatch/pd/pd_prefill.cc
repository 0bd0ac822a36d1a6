// PdPair's prefill leg: RunPrefill and what the client gets when it failed
// (pd_pair.h).
#include <utility>

#include "router/dispatch/attempt_watch.h"
#include "router/dispatch/leg_request.h"
#include "router/dispatch/pd/pd_pair.h"
#include "router/dispatch/relay.h"
#include "router/request/api_errors.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

namespace asio = http::asio;

constexpr uint64_t kMaxPrefillAnswerBytes = uint64_t{16} << 20;

// An answer already read whole (a prefill leg's 4xx), for Relay.
class BufferedResponse final : public UpstreamResponse {
 public:
  BufferedResponse(int status, http::Headers headers, std::string body)
      : status_(status), headers_(std::move(headers)), body_(std::move(body)) {}
  int status() const override { return status_; }
  const http::Headers& headers() const override { return headers_; }
  http::Awaitable<absl::StatusOr<std::optional<std::string>>> Read() override {
    if (read_) co_return std::optional<std::string>();
    read_ = true;
    co_return std::optional<std::string>(std::move(body_));
  }
  http::Awaitable<absl::StatusOr<std::string>> ReadAll(uint64_t) override {
    read_ = true;
    co_return std::move(body_);
  }
  void Cancel() override {}

 private:
  int status_;
  http::Headers headers_;
  std::string body_;
  bool read_ = false;
};

}  // namespace

http::Awaitable<void> PdPair::RunPrefill(RequestContext& ctx, const PickLeg& leg, std::string body,
                                         std::shared_ptr<http::Cancellation> cancel,
                                         PrefillResult& out) {
  const FleetWorker& worker = *leg.worker;
  SendFailures& failures = sender_.failures();
  UpstreamRequest up = LegHead(ctx, leg);
  up.body = std::move(body);
  // The prefill's head comes with its whole answer: only the health checks cut it.
  AttemptWatch watch(co_await asio::this_coro::executor, worker, cancel, 0);
  up.cancel = watch.cancel();
  const int64_t start_ns = clock_.NowNs();
  auto sent = co_await sender_.upstream().Send(std::move(up));
  if (const AttemptWatch::Fired fired = watch.Disarm();
      fired != AttemptWatch::Fired::kNone && !cancel->cancelled()) {
    if (sent.ok()) (*sent)->Cancel();
    out.message = failures
                      .JudgeWatch(worker, fired, sender_.first_byte_timeout_ms(), "prefill worker")
                      .message;
    metrics_.pd().CountBootstrapFailure("prefill_unreachable");
    out.kind = PrefillResult::kFailed;
    co_return;
  }
  absl::Status error;
  if (sent.ok()) {
    out.status = (*sent)->status();
    out.headers = (*sent)->headers();
    auto body_or = co_await (*sent)->ReadAll(kMaxPrefillAnswerBytes);
    if (body_or.ok()) {
      out.body = std::move(*body_or);
    } else {
      error = body_or.status();
    }
  } else {
    error = sent.status();
  }
  if (!error.ok()) {
    SendFailures::Judged failed =
        failures.Judge(worker, error, cancel->cancelled(), ctx.request_id, "prefill worker");
    out.message = std::move(failed.message);
    out.detail = std::move(failed.detail);
    switch (failed.kind) {
      case SendFailures::Kind::kCancelled:
        out.kind = PrefillResult::kCancelled;
        break;
      case SendFailures::Kind::kLocal:
        out.kind = PrefillResult::kLocal;
        break;
      case SendFailures::Kind::kTimeout:
        metrics_.pd().CountBootstrapFailure("prefill_timeout");
        out.kind = PrefillResult::kTimeout;
        break;
      case SendFailures::Kind::kUnreachable:
        metrics_.pd().CountBootstrapFailure("prefill_unreachable");
        out.kind = PrefillResult::kFailed;
        break;
    }
    co_return;
  }
  if (out.status >= 500) {
    failures.Report(worker, "status_5xx");
    metrics_.pd().CountBootstrapFailure("prefill_status");
    out.kind = PrefillResult::kFailed;
    out.message = UpstreamStatusMessage("the prefill worker", out.status, out.body);
    co_return;
  }
  worker.health.OnSuccess();
  metrics_.pd().ObserveLeg(core::Role::kPrefill, worker.record.worker_id,
                           (clock_.NowNs() - start_ns) * 1e-9);
  out.kind = out.status >= 400 ? PrefillResult::kClientError : PrefillResult::kOk;
}

http::Awaitable<LegEnd> PdPair::PrefillFailed(RequestContext& ctx, http::ResponseWriter& w,
                                              const PickLeg& leg, PrefillResult& prefill,
                                              PlanHistory& history, LegFailure& failure) {
  const std::string& worker_id = leg.worker->record.worker_id;
  switch (prefill.kind) {
    case PrefillResult::kOk:
    case PrefillResult::kFailed:
      if (prefill.detail.empty()) {
        spdlog::warn("request {}: prefill worker {}: {}", ctx.request_id, worker_id,
                     prefill.message);
      } else {
        spdlog::warn("request {}: {}", ctx.request_id, prefill.detail);
      }
      history.tried.push_back(worker_id);
      failure = {502, std::move(prefill.message)};
      co_return LegEnd::kFailed;
    case PrefillResult::kClientError: {
      BufferedResponse answer(prefill.status, std::move(prefill.headers), std::move(prefill.body));
      co_await Relay::Run(ctx, answer, worker_id, ctx.transform.get(), w);
      co_return LegEnd::kAnswered;
    }
    case PrefillResult::kTimeout:
      ctx.End(Outcome::kTimeout, 504);
      co_await SendError(w, ctx.kind, 504, std::move(prefill.message), ctx.request_id);
      co_return LegEnd::kAnswered;
    case PrefillResult::kLocal:
      ctx.End(Outcome::kRouterError, 503);
      co_await SendError(w, ctx.kind, 503, std::move(prefill.message), ctx.request_id);
      co_return LegEnd::kAnswered;
    case PrefillResult::kCancelled:
      break;
  }
  co_return LegEnd::kCancelled;
}

}  // namespace infera::router
