// PdDispatcher: prefill/decode disaggregation, two legs per request (doc/pd.md §6,
// architecture §9, spec "Tuning prefill vs decode separately (PD)").
//
// A request whose model is served by a prefill or decode worker takes this path; any
// other goes to the mixed dispatcher unchanged. Per attempt (up to max_attempts):
//   PickPlanner::PlanPd -> 503 (a pool is missing) / 501 (protocols disagree), or
//   one leg (decode-only: conditional disaggregation; mixed: no complete pair): sent
//     with the client's body and relayed; failover to another worker before the
//     first byte, as the mixed dispatcher does;
//   two legs, in the protocol's order (pd_protocol.h):
//     serial (vllm-nixl): prefill (its holds released when it answers), then decode
//       with what the prefill answered;
//     concurrent (sglang-bootstrap, vllm-mooncake): both at once; the prefill's holds
//       go at the end of the request, or when it answers with
//       --pd-prefill-guard-release prefill.
//     The decode leg is tried up to decode_attempts times before its first byte
//     (backoff doubling from decode_backoff_ms), never cancelling the prefill leg;
//     its answer is relayed (Relay: errors after the first byte are one SSE error
//     event). A decode worker that still fails before its first byte fails the
//     attempt over: the next attempt plans a new pair without it (the KV hand-off
//     died with it, so both legs go again). A prefill leg that fails (unreachable,
//     5xx, no kv_transfer_params) before the decode's first byte cancels the decode
//     leg and fails the attempt over to another prefill worker; a prefill 4xx is the
//     client's answer; the last failure is a 502 naming the leg and worker. A
//     deadline is 504.
//   Every leg's exchange is watched until its answer head (AttemptWatch): a worker
//   that fails its health checks meanwhile, or a streaming decode/single leg without a
//   head within first_byte_timeout_ms, fails that leg as an unreachable worker would.
//   Client disconnect cancels both legs. Every hold is released exactly once: the
//   plan's PickGuards, whatever way the attempt ends; both legs end before Dispatch
//   returns. Breakers hear about every worker picked (success, failure, abandoned).
// Metrics: PdMetrics (pd_metrics.h) and the picks per role.
//
// Thread-safety: Dispatch may run on every loop at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "core/clock.h"
#include "router/dispatch/dispatcher.h"
#include "router/dispatch/pd/options.h"
#include "router/plan/pick_planner.h"
#include "router/metrics/router_metrics.h"
#include "router/dispatch/send_failure.h"
#include "router/dispatch/upstream.h"
#include "router/plan/worker_set.h"

namespace infera::router {

class PdDispatcher final : public Dispatcher {
 public:
  // REQUIRES: every reference outlives the dispatcher; max_attempts >= 1.
  PdDispatcher(int max_attempts, int64_t request_timeout_ms, PdOptions options,
               const WorkerSet& workers, PickPlanner& planner, Upstream& upstream,
               Dispatcher& mixed, const core::Clock& clock, RouterMetrics& metrics, uint64_t seed,
               int64_t first_byte_timeout_ms = 0);

  http::Awaitable<void> Dispatch(RequestContext& ctx, http::ResponseWriter& w) override;

  // How a leg ended (internal; public for the helpers in pd_dispatcher.cc).
  enum class LegEnd : uint8_t {
    kAnswered,   // the client has its answer (relayed or an error sent)
    kFailed,     // nothing reached the client; `failure` says why
    kCancelled,  // cancelled before the first byte (the client went away, or the
                 // prefill leg failed)
  };
  struct Failure {
    int status = 503;
    std::string message = "no worker available";
  };
  struct PrefillResult;  // pd_dispatcher.cc

  // The prefill leg: sent, read whole, reported to the breaker and metrics.
  http::Awaitable<void> RunPrefill(RequestContext& ctx, const PickLeg& leg, std::string body,
                                   std::shared_ptr<http::Cancellation> cancel, PrefillResult& out);

 private:
  // True when a prefill or decode worker serves ctx's model.
  bool ServesPd(const RequestContext& ctx) const;
  http::Awaitable<void> DispatchPd(RequestContext& ctx, http::ResponseWriter& w);
  // One plan with two legs; kFailed asks for failover (history.tried has the culprit).
  // `attempt` (0-based) keys the pair's transfer apart from a failed pair's.
  http::Awaitable<LegEnd> RunPair(RequestContext& ctx, http::ResponseWriter& w, PickPlan& plan,
                                  int attempt, PlanHistory& history, Failure& failure);
  // Sends `leg` (`body`, or the request's own when null) up to `tries` times and
  // relays its answer. `relaying` turns true when the answer starts to go out.
  http::Awaitable<LegEnd> SendAndRelay(RequestContext& ctx, http::ResponseWriter& w,
                                       const PickLeg& leg, const std::string* body,
                                       std::shared_ptr<http::Cancellation> cancel, int tries,
                                       bool* relaying, Failure& failure);
  // What the client gets when the prefill leg did not succeed (kFailed: failover).
  http::Awaitable<LegEnd> PrefillFailed(RequestContext& ctx, http::ResponseWriter& w,
                                        const PickLeg& leg, PrefillResult& prefill,
                                        PlanHistory& history, Failure& failure);
  uint64_t NextRandom();

  const int max_attempts_;
  const PdOptions options_;
  const WorkerSet& workers_;
  PickPlanner& planner_;
  Upstream& upstream_;
  Dispatcher& mixed_;
  const core::Clock& clock_;
  RouterMetrics& metrics_;
  SendFailures failures_;
  const uint64_t seed_;
  const int64_t first_byte_timeout_ms_;  // --first-byte-timeout-ms (0: off)
  std::atomic<uint64_t> counter_{0};
};

}  // namespace infera::router
