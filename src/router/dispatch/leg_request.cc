#include "router/dispatch/leg_request.h"

namespace infera::router {

bool TakesBodyDpRank(const discovery::WorkerRecord& record) {
  return record.engine == "sglang" || record.pd_protocol == discovery::PdProtocol::kSglangBootstrap;
}

void AddressWorker(UpstreamRequest& up, const FleetWorker& worker) {
  up.endpoint = worker.endpoint;
  up.worker_id = worker.record.worker_id;
  up.transport =
      worker.record.request_transport == "nats" ? RequestTransport::kNats : RequestTransport::kHttp;
}

namespace {

// The router owns the rank: a client's is replaced (SGLang's body rank) or dropped.
void SetBodyRank(nlohmann::json& j, const PickLeg& leg, bool body_rank) {
  j.erase("routed_dp_rank");
  if (body_rank) {
    j["data_parallel_rank"] = *leg.dp_rank;
  } else {
    j.erase("data_parallel_rank");
  }
}

}  // namespace

UpstreamRequest LegHead(const RequestContext& ctx, const PickLeg& leg) {
  UpstreamRequest up;
  AddressWorker(up, *leg.worker);
  up.path = ctx.upstream_path;
  up.headers.Add("Content-Type", "application/json");
  up.headers.Add("X-Infera-Request-Id", ctx.request_id);
  if (!ctx.authorization.empty()) up.headers.Add("Authorization", ctx.authorization);
  // The hops so far and this router: a worker record that points back at a router
  // brings the request back with this router's id in it (RequestPipeline: 508).
  if (!ctx.via.empty()) up.headers.Add("X-Infera-Via", ctx.via);
  // The pick's rank pins the request (vLLM and SGLang both read the header).
  if (leg.dp_rank) up.headers.Add(kDpRankHeader, std::to_string(*leg.dp_rank));
  up.deadline_ns = ctx.deadline_ns;
  up.cancel = ctx.cancel;
  return up;
}

UpstreamRequest LegRequest(const RequestContext& ctx, const PickLeg& leg) {
  UpstreamRequest up = LegHead(ctx, leg);
  const bool body_rank = leg.dp_rank && TakesBodyDpRank(leg.worker->record);
  if (!body_rank && !ctx.api.client_dp_rank) {
    up.body = ctx.upstream_body;
    return up;
  }
  nlohmann::json j = nlohmann::json::parse(ctx.upstream_body, nullptr, false);
  if (!j.is_object()) {
    up.body = ctx.upstream_body;
    return up;
  }
  SetBodyRank(j, leg, body_rank);
  up.body = j.dump();
  return up;
}

void EditLegJson(nlohmann::json& body, const RequestContext& ctx, const PickLeg& leg) {
  const bool body_rank = leg.dp_rank && TakesBodyDpRank(leg.worker->record);
  if ((body_rank || ctx.api.client_dp_rank) && body.is_object()) SetBodyRank(body, leg, body_rank);
}

}  // namespace infera::router
