// PdPair: one disaggregated attempt, a prefill leg and a decode leg (doc/pd.md §6,
// architecture §9, spec "Tuning prefill vs decode separately (PD)"). The attempt loop
// (attempt_loop.h) plans the pair, counts it and fails over; this sends it.
//
// The legs go in the protocol's order (protocol.h):
//   serial (vllm-nixl): prefill (its holds released when it answers), then decode
//     with what the prefill answered;
//   concurrent (sglang-bootstrap, vllm-mooncake): both at once; the prefill's holds go
//     at the end of the request, or when it answers with --pd-prefill-guard-release
//     prefill.
// The decode leg is LegSender::SendAndRelay (leg_send.h), tried up to decode_attempts
// times before its first byte (backoff doubling from decode_backoff_ms), never
// cancelling the prefill leg; its answer is relayed (errors after the first byte are
// one SSE error event). A decode worker that still fails before its first byte fails
// the attempt over: the next attempt plans a new pair without it (the KV hand-off died
// with it, so both legs go again). A prefill leg that fails (unreachable, 5xx, no
// kv_transfer_params) before the decode's first byte cancels the decode leg and fails
// the attempt over to another prefill worker; a prefill 4xx is the client's answer; a
// deadline is 504. The prefill's exchange is watched until its answer (AttemptWatch):
// a worker that fails its health checks meanwhile fails the leg. Client disconnect
// cancels both legs; both legs end before Run returns. Breakers hear about every
// worker picked (success, failure, abandoned).
// Metrics: PdMetrics (pd_metrics.h).
//
// Thread-safety: Run may run on every loop at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/clock.h"
#include "http/headers.h"
#include "router/dispatch/leg_send.h"
#include "router/dispatch/pd/options.h"
#include "router/dispatch/pd/protocol.h"
#include "router/metrics/router_metrics.h"
#include "router/plan/pick_planner.h"

namespace infera::router {

class PdPair {
 public:
  // REQUIRES: every reference outlives the pair.
  PdPair(PdOptions options, LegSender& sender, const core::Clock& clock, RouterMetrics& metrics,
         uint64_t seed);

  // One plan with two legs; kFailed asks for failover (history.tried has the culprit).
  // `attempt` (0-based) keys the pair's transfer apart from a failed pair's.
  http::Awaitable<LegEnd> Run(RequestContext& ctx, http::ResponseWriter& w, PickPlan& plan,
                              int attempt, PlanHistory& history, LegFailure& failure);

  // How the prefill leg ended (RunPrefill).
  struct PrefillResult {
    enum Kind : uint8_t { kOk, kFailed, kClientError, kCancelled, kTimeout, kLocal };
    Kind kind = kCancelled;
    int status = 0;
    http::Headers headers;
    std::string body;
    std::string message;  // for the client: names no worker or address
    std::string detail;   // for the log: the worker and what failed (empty: `message`)
  };
  struct Attempt;  // pd_pair.cc: one Run's state

  // The prefill leg: sent, read whole, reported to the breaker and metrics.
  http::Awaitable<void> RunPrefill(RequestContext& ctx, const PickLeg& leg, std::string body,
                                   std::shared_ptr<http::Cancellation> cancel, PrefillResult& out);

 private:
  http::Awaitable<LegEnd> RunSerial(Attempt& a, std::string pre_body);
  http::Awaitable<LegEnd> RunConcurrent(Attempt& a, std::string pre_body);
  // What the client gets when the prefill leg did not succeed (kFailed: failover).
  static http::Awaitable<LegEnd> PrefillFailed(RequestContext& ctx, http::ResponseWriter& w,
                                               const PickLeg& leg, PrefillResult& prefill,
                                               PlanHistory& history, LegFailure& failure);
  // What the pair's decode leg ending as `end` means for the attempt.
  http::Awaitable<LegEnd> DecodeEnded(Attempt& a, LegEnd end);
  LegSendOptions DecodeOptions(Attempt& a, const std::string* body) const;
  uint64_t NextRandom();

  const PdOptions options_;
  LegSender& sender_;
  const core::Clock& clock_;
  RouterMetrics& metrics_;
  const uint64_t seed_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace infera::router
