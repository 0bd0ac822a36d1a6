// SendFailures: how both dispatchers judge an exchange with a worker that failed before
// its answer started (a failed Upstream::Send or prefill-body read) or answered 5xx.
//
//   cancelled (the client went away, or the leg was cancelled): the breaker's probe
//     slot is freed without judging the worker;
//   local (Send's ResourceExhausted: the router's own descriptors or buffers ran out,
//     EMFILE, ENFILE, ENOBUFS, ENOMEM): no failure of the worker; its probe slot is
//     freed, infera_router_local_errors_total{kind} counts it, the log says so at most
//     once a second; the client gets 503 at once;
//   timeout (DeadlineExceeded): a breaker failure, upstream_errors{kind="timeout"},
//     504 (no failover: the worker may still be working);
//   unreachable (anything else): a breaker failure, upstream_errors{kind="unreachable"},
//     502 unless another worker answers (failover).
// An AttemptWatch that ended the attempt before its answer head (JudgeWatch):
//   first_byte_timeout: a breaker failure, upstream_errors{kind="first_byte_timeout"},
//     failover (502 unless another worker answers);
//   unhealthy (the worker failed its health checks meanwhile): failover; the health
//     checks already keep the worker out of picks, so the breaker's probe slot is only
//     freed; upstream_errors{kind="unhealthy"}.
//
// Thread-safety: every method may run on every loop at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/clock.h"
#include "http/server.h"
#include "router/dispatch/attempt_watch.h"
#include "router/plan/fleet.h"
#include "router/log_limiter.h"
#include "router/request/request_context.h"
#include "router/metrics/router_metrics.h"

namespace infera::router {

class SendFailures {
 public:
  enum class Kind : uint8_t { kCancelled, kLocal, kTimeout, kUnreachable };
  struct Judged {
    Kind kind;
    int http_status;  // 499, 503, 504, 502
    // For the client's error: names no worker, address or transport detail (they may
    // carry internal addresses, even URL credentials); empty when cancelled.
    std::string message;
    // For the log line (with the request id): the worker's id and what failed.
    std::string detail;
  };

  // REQUIRES: clock and metrics outlive this.
  SendFailures(int64_t request_timeout_ms, const core::Clock& clock, RouterMetrics& metrics);

  // Judges and records `status` (not OK) for `worker`. `cancelled`: the caller knows
  // the client is gone or the leg was cancelled. `who` names the worker in messages
  // ("worker", "prefill worker").
  Judged Judge(const FleetWorker& worker, const absl::Status& status, bool cancelled,
               std::string_view request_id, std::string_view who = "worker");

  // Judges an attempt its AttemptWatch ended (REQUIRES: fired is not kNone);
  // `first_byte_timeout_ms` names the limit in the message. Kind kUnreachable.
  Judged JudgeWatch(const FleetWorker& worker, AttemptWatch::Fired fired,
                    int64_t first_byte_timeout_ms, std::string_view who = "worker");

  // Records a failed exchange: the breaker and infera_router_upstream_errors_total{kind}.
  void Report(const FleetWorker& worker, const char* kind);

  // A timeout or local failure is the client's answer at once: ends ctx (504 timeout,
  // 503 router_error) and sends the API's error. REQUIRES: failed.kind is kTimeout or
  // kLocal; nothing was sent to the client yet.
  static http::Awaitable<void> Answer(RequestContext& ctx, http::ResponseWriter& w, Judged failed);

 private:
  const int64_t request_timeout_ms_;
  const core::Clock& clock_;
  RouterMetrics& metrics_;
  LogLimiter local_log_;  // local failures: one line per second at most
};

}  // namespace infera::router
