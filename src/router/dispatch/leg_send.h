// LegSend: the one copy of an attempt's send, judged and relayed, shared by the mixed
// and the PD paths of the attempt loop (attempt_loop.h), and the final error when no
// worker answered before the first byte.
//
// SendAndRelay sends one leg up to `tries` times (backoff doubling from backoff_ms)
// and judges each failure before the first byte (send_failure.h):
//   client gone / leg cancelled: the breaker's probe is freed, kCancelled;
//   deadline or the router's own resources: the client's answer at once (504, 503),
//   kAnswered;
//   unreachable, a 5xx answer, or the AttemptWatch ended it (first-byte timeout,
//   failed health checks): a breaker failure, `failure` says why, next try, then
//   kFailed (the caller fails over);
//   otherwise: breaker success, Relay answers the client, kAnswered.
// `decode_leg` (the decode leg of a disaggregated plan) also counts
// infera_pd_bootstrap_failures_total{reason="decode_*"} and the leg's duration.
//
// Thread-safety: every method may run on every loop at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/clock.h"
#include "http/server.h"
#include "router/dispatch/relay.h"
#include "router/dispatch/send_failure.h"
#include "router/dispatch/upstream.h"
#include "router/metrics/router_metrics.h"
#include "router/plan/pick_planner.h"
#include "router/request/request_context.h"

namespace infera::router {

// How a leg (or an attempt) ended.
enum class LegEnd : uint8_t {
  kAnswered,   // the client has its answer (relayed or an error sent)
  kFailed,     // nothing reached the client; the LegFailure says why
  kCancelled,  // cancelled before the first byte (the client went away, or the
               // prefill leg failed)
};

// The last failure before the first byte: the client's error if no attempt answers.
struct LegFailure {
  int status = 503;
  std::string message = "no worker available";
};

struct LegSendOptions {
  const std::string* body = nullptr;  // the leg's body (null: the request's own)
  std::shared_ptr<http::Cancellation> cancel;
  int tries = 1;
  int64_t backoff_ms = 0;
  bool decode_leg = false;
  bool* relaying = nullptr;          // set when the answer starts to go out
  RelayFeedback* feedback = nullptr;  // what the relay saw (may be null)
};

class LegSender {
 public:
  // REQUIRES: every reference outlives the sender.
  LegSender(Upstream& upstream, SendFailures& failures, RouterMetrics& metrics,
            const core::Clock& clock, int64_t first_byte_timeout_ms);

  http::Awaitable<LegEnd> SendAndRelay(RequestContext& ctx, http::ResponseWriter& w,
                                       const PickLeg& leg, LegSendOptions options,
                                       LegFailure& failure);

  Upstream& upstream() const { return upstream_; }
  SendFailures& failures() const { return failures_; }
  int64_t first_byte_timeout_ms() const { return first_byte_timeout_ms_; }

 private:
  Upstream& upstream_;
  SendFailures& failures_;
  RouterMetrics& metrics_;
  const core::Clock& clock_;
  const int64_t first_byte_timeout_ms_;  // --first-byte-timeout-ms (0: off)
};

// No attempt answered before the first byte: ends ctx and sends the error, from what
// the plans saw (`history`) or else the last failure: 503 no workers / no worker
// available (breakers open, health checks failing), 404 model_not_found, or
// `failure` (502 naming the leg's worker, 503 the selector's refusal).
http::Awaitable<void> AnswerNoWorker(RequestContext& ctx, http::ResponseWriter& w,
                                     const PlanHistory& history, LegFailure failure);

}  // namespace infera::router
