#include "router/send_failure.h"

#include <chrono>

#include "http/client.h"
#include "router/api_errors.h"
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

bool SendFailures::AllowLocalLog() {
  // The wall clock paces a log line, not a routing decision: the injected clock stays
  // for the breaker.
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t next = next_log_ns_.load(std::memory_order_relaxed);
  if (now_ns < next || !next_log_ns_.compare_exchange_strong(next, now_ns + 1'000'000'000)) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

SendFailures::Judged SendFailures::Judge(const FleetWorker& worker, const absl::Status& status,
                                         bool cancelled, std::string_view request_id,
                                         std::string_view who) {
  const std::string& worker_id = worker.record.worker_id;
  const absl::StatusCode code = status.code();
  if (cancelled || code == absl::StatusCode::kCancelled) {
    worker.health.OnAbandoned();
    return {Kind::kCancelled, 499, {}};
  }
  if (code == absl::StatusCode::kResourceExhausted) {
    worker.health.OnAbandoned();
    const std::string kind = http::LocalErrorKind(status);
    metrics_.CountLocalError(kind.empty() ? "other" : kind);
    if (AllowLocalLog()) {
      spdlog::warn("request {}: {} ({} more in the last second not logged)", request_id,
                   std::string(status.message()), suppressed_.exchange(0));
    }
    return {Kind::kLocal, 503,
            "the router is out of local resources (" + std::string(status.message()) +
                "); retry later"};
  }
  if (code == absl::StatusCode::kDeadlineExceeded) {
    Report(worker, "timeout");
    return {Kind::kTimeout, 504,
            std::string(who) + " " + worker_id + " did not answer within " +
                std::to_string(request_timeout_ms_) + " ms"};
  }
  Report(worker, "unreachable");
  return {Kind::kUnreachable, 502,
          std::string(who) + " " + worker_id + " failed: " + std::string(status.message())};
}

SendFailures::Judged SendFailures::JudgeWatch(const FleetWorker& worker, AttemptWatch::Fired fired,
                                              int64_t first_byte_timeout_ms, std::string_view who) {
  const std::string& worker_id = worker.record.worker_id;
  if (fired == AttemptWatch::Fired::kFirstByteTimeout) {
    Report(worker, "first_byte_timeout");
    return {Kind::kUnreachable, 502,
            std::string(who) + " " + worker_id + " sent no first byte within " +
                std::to_string(first_byte_timeout_ms) + " ms"};
  }
  worker.health.OnAbandoned();
  metrics_.CountUpstreamError(worker_id, "unhealthy");
  return {Kind::kUnreachable, 502,
          std::string(who) + " " + worker_id + " failed its health checks before answering"};
}

http::Awaitable<void> SendFailures::Answer(RequestContext& ctx, http::ResponseWriter& w,
                                           Judged failed) {
  ctx.End(failed.kind == Kind::kTimeout ? Outcome::kTimeout : Outcome::kRouterError,
          failed.http_status);
  co_await SendError(w, ctx.kind, failed.http_status, std::move(failed.message), ctx.request_id);
}

}  // namespace infera::router
