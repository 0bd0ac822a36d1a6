#include "router/dispatch/send_failure.h"

#include "http/client.h"
#include "router/request/api_errors.h"
#include "router/dispatch/upstream.h"
#include "spdlog/spdlog.h"

namespace infera::router {

SendFailures::SendFailures(int64_t request_timeout_ms, const core::Clock& clock,
                           RouterMetrics& metrics)
    : request_timeout_ms_(request_timeout_ms), clock_(clock), metrics_(metrics) {}

void SendFailures::Report(const FleetWorker& worker, const char* kind) {
  if (const int64_t cooldown_ns = worker.health.OnFailure(clock_.NowNs()); cooldown_ns > 0) {
    spdlog::warn("breaker: worker {} open for {:.1f} s after a {} failure", worker.record.worker_id,
                 cooldown_ns * 1e-9, kind);
  }
  metrics_.CountUpstreamError(worker.record.worker_id, kind);
}

SendFailures::Judged SendFailures::Judge(const FleetWorker& worker, const absl::Status& status,
                                         bool cancelled, std::string_view request_id,
                                         std::string_view who) {
  const std::string& worker_id = worker.record.worker_id;
  const absl::StatusCode code = status.code();
  if (cancelled || code == absl::StatusCode::kCancelled) {
    worker.health.OnAbandoned();
    return {Kind::kCancelled, 499, {}, {}};
  }
  std::string detail = std::string(who) + " " + worker_id + ": " + std::string(status.message());
  if (code == absl::StatusCode::kResourceExhausted) {
    worker.health.OnAbandoned();
    const std::string kind = http::LocalErrorKind(status);
    metrics_.CountLocalError(kind.empty() ? "other" : kind);
    if (uint64_t skipped = 0; local_log_.Allow(&skipped)) {
      spdlog::warn("request {}: {} ({} more in the last second not logged)", request_id, detail,
                   skipped);
    }
    return {Kind::kLocal, 503,
            "the router is out of local resources (" + (kind.empty() ? "other" : kind) +
                "); retry later",
            std::move(detail)};
  }
  if (code == absl::StatusCode::kDeadlineExceeded) {
    Report(worker, "timeout");
    return {Kind::kTimeout, 504,
            "the " + std::string(who) + " did not answer within " +
                std::to_string(request_timeout_ms_) + " ms",
            std::move(detail)};
  }
  Report(worker, "unreachable");
  if (const std::string safe = ClientMessage(status); !safe.empty()) {
    return {Kind::kUnreachable, 502, "the " + std::string(who) + " failed before answering: " + safe,
            std::move(detail)};
  }
  return {Kind::kUnreachable, 502,
          "the " + std::string(who) + " failed before answering (" +
              (code == absl::StatusCode::kDataLoss ? "malformed response" : "connection failed") +
              ")",
          std::move(detail)};
}

SendFailures::Judged SendFailures::JudgeWatch(const FleetWorker& worker, AttemptWatch::Fired fired,
                                              int64_t first_byte_timeout_ms, std::string_view who) {
  const std::string& worker_id = worker.record.worker_id;
  if (fired == AttemptWatch::Fired::kFirstByteTimeout) {
    Report(worker, "first_byte_timeout");
    return {Kind::kUnreachable, 502,
            "the " + std::string(who) + " sent no first byte within " +
                std::to_string(first_byte_timeout_ms) + " ms",
            std::string(who) + " " + worker_id + " sent no first byte within " +
                std::to_string(first_byte_timeout_ms) + " ms"};
  }
  worker.health.OnAbandoned();
  metrics_.CountUpstreamError(worker_id, "unhealthy");
  return {Kind::kUnreachable, 502, "the " + std::string(who) + " failed its health checks before answering",
          std::string(who) + " " + worker_id + " failed its health checks before answering"};
}

http::Awaitable<void> SendFailures::Answer(RequestContext& ctx, http::ResponseWriter& w,
                                           Judged failed) {
  if (failed.kind == Kind::kTimeout) spdlog::warn("request {}: {}", ctx.request_id, failed.detail);
  ctx.End(failed.kind == Kind::kTimeout ? Outcome::kTimeout : Outcome::kRouterError,
          failed.http_status);
  co_await SendError(w, ctx.kind, failed.http_status, std::move(failed.message), ctx.request_id);
}

}  // namespace infera::router
