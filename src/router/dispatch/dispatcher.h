// Dispatcher: sends a prepared request to the fleet and answers the client.
//
// It owns the attempt loop: plan (PickPlanner), send each leg (Upstream), fail over
// before the first byte, relay (Relay), release the plan's guards. The router's one
// implementation is AttemptLoop (attempt_loop.h), mixed and PD alike: one leg per
// mixed attempt, a prefill and a decode leg per disaggregated one (PdPair,
// pd/pd_pair.h, with one PdProtocol leaf per transfer protocol).
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
