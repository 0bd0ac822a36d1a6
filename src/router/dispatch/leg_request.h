// LegRequest: the upstream request of one leg of a plan.
//
// Headers: Content-Type, X-Infera-Request-Id, the client's Authorization,
// X-Infera-Via (the request's hops and this router: loop detection), and
// X-Data-Parallel-Rank: r when the leg's worker has several DP ranks (vLLM's
// header; SGLang reads it too). Body: the request's upstream body; for a worker
// with several ranks that speaks SGLang (engine "sglang" or sglang-bootstrap) the
// body's data_parallel_rank is set to r too. A client's data_parallel_rank /
// routed_dp_rank never reaches a worker: replaced or removed (doc/data-parallel.md).
// A PD protocol leaf (pd/protocol.h) adds its own fields (bootstrap room,
// kv_transfer_params) to this body.
//
// Thread-safety: pure.
#pragma once

#include <nlohmann/json.hpp>

#include "router/plan/pick_plan.h"
#include "router/request/request_context.h"
#include "router/dispatch/upstream.h"

namespace infera::router {

inline constexpr const char* kDpRankHeader = "X-Data-Parallel-Rank";

// Addresses `up` to `worker`: its endpoint, its id, and the request transport its
// record asks for (request_transport: http or nats; transport_upstream.h).
void AddressWorker(UpstreamRequest& up, const FleetWorker& worker);

// True when the worker reads the rank from the body's data_parallel_rank (SGLang).
bool TakesBodyDpRank(const discovery::WorkerRecord& record);

// The leg's request without its body: address, path, headers, deadline, cancellation.
// For a leg whose body is made elsewhere (a PD protocol's). REQUIRES: leg.worker is set.
UpstreamRequest LegHead(const RequestContext& ctx, const PickLeg& leg);

// LegHead plus the body: the request's upstream body, parsed and serialised again only
// when the rank edits apply. REQUIRES: leg.worker is set.
UpstreamRequest LegRequest(const RequestContext& ctx, const PickLeg& leg);

// The same rank edits on a body already parsed (the PD legs share one parse of the
// request's upstream body and serialise each leg's body once, after their protocol's
// edits). A body that is not an object is left as it is.
void EditLegJson(nlohmann::json& body, const RequestContext& ctx, const PickLeg& leg);

}  // namespace infera::router
