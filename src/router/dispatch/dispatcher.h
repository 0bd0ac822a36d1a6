// Dispatcher: sends a prepared request to the fleet and answers the client.
//
// It owns the attempt loop: plan (PickPlanner), send each leg (Upstream), fail over
// before the first byte, relay (Relay), release the plan's guards. Implementations:
//   MixedDispatcher (mixed_dispatcher.h): one leg per attempt, today's only one.
//   a PD dispatcher (next): prefill leg then decode leg of a two-leg PickPlan, with
//   one small protocol leaf per transfer protocol (sglang-bootstrap, vllm-nixl,
//   vllm-mooncake) rewriting the leg bodies (leg_request.h).
// RequestPipeline chooses the dispatcher.
//
// Sets ctx.outcome and ctx.status. Thread-safety: Dispatch runs on the request's
// loop; one dispatcher serves every loop concurrently.
#pragma once

#include "http/server.h"
#include "router/request/request_context.h"

namespace infera::router {

class Dispatcher {
 public:
  virtual ~Dispatcher() = default;
  virtual http::Awaitable<void> Dispatch(RequestContext& ctx, http::ResponseWriter& w) = 0;
};

}  // namespace infera::router
