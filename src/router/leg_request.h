// LegRequest: the upstream request of one leg of a plan.
//
// Headers: Content-Type, X-Infera-Request-Id, the client's Authorization. Body: the
// request's upstream body, with data_parallel_rank set for a worker with several DP
// ranks (a client's value replaced) and a client's removed for a worker with one. A PD protocol
// leaf adds its own fields (bootstrap room, kv_transfer_params) through `extra` the same way.
//
// Thread-safety: pure.
#pragma once

#include <nlohmann/json.hpp>

#include "router/pick_plan.h"
#include "router/request_context.h"
#include "router/upstream.h"

namespace infera::router {

// REQUIRES: leg.worker is set. `extra` (an object, may be null) is merged into the
// body's top level.
UpstreamRequest LegRequest(const RequestContext& ctx, const PickLeg& leg,
                           const nlohmann::json* extra = nullptr);

}  // namespace infera::router
