// RequestPipeline: one inference request from parse to stats (doc/router-pipeline.md).
//
//   loop check (X-Infera-Via holds this router's id: 508) -> ParseApiRequest (400 on
//   bad input; a large body on the work pool) -> the cache_salt (the client's, or with
//   --tenant-cache-salt its tenant's, TenantSalt) -> the upstream body (Anthropic:
//   translated to chat; the salt set in it) -> PromptEncoder (tokens; a large prompt on
//   the pool) -> the answer's transform (Anthropic: AnthropicTransform, told the
//   prompt's tokens) -> Dispatcher (plan, send, fail over, relay, release) -> metrics.
// The request never goes back a stage. The simdjson parse of the body is used by the
// encoder before the first suspension point (it lives in the thread's parser). A body
// of WorkPool::kMinBytes or more is parsed, validated and translated on the work pool,
// never on the event loop (a 300,000-block /v1/messages body cost 2.1 s there).
//
// Loop detection: every request the router sends upstream carries X-Infera-Via, the
// hops it came through plus this router's id (random per process); a request whose
// X-Infera-Via already holds the id, or kMaxHops hops, came back through a worker
// record that points at a router: 508 in the API's error shape, counted in
// infera_router_loops_detected_total (doc/router.md "Loop detection").
// Whatever a stage throws is caught here: 500 in the API's error shape (in-band once
// streaming), outcome router_error, counted, the in-flight gauge back down.
//
// Thread-safety: Serve runs on the connection's loop; one pipeline serves all loops.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "http/server.h"
#include "router/dispatch/dispatcher.h"
#include "router/encode/prompt_encoder.h"
#include "router/metrics/router_metrics.h"
#include "router/request/api_request.h"
#include "router/request/tenant_salt.h"
#include "router/work_pool.h"

namespace infera::router {

class AdmissionDispatcher;

// The request header that carries the routers a request passed through.
inline constexpr std::string_view kViaHeader = "X-Infera-Via";

struct PipelineOptions {
  int64_t request_timeout_ms = 600'000;
  RelayLimits relay;      // metrics: filled by the pipeline
  std::string router_id;  // this router's hop id in X-Infera-Via
  // Hops (router ids in X-Infera-Via) a request may already carry; more is a loop.
  size_t max_hops = 8;
  // --admission-queue on: admits each request before the dispatcher plans it
  // (doc/admission.md); null: off. REQUIRES: outlives the pipeline.
  AdmissionDispatcher* admission = nullptr;
};

// True when `via` (the X-Infera-Via fields, comma-separated ids) names `router_id`
// or holds `max_hops` ids or more. Pure; ids are compared exactly, blanks trimmed.
bool ViaIsLoop(std::string_view via, std::string_view router_id, size_t max_hops);

class RequestPipeline {
 public:
  // REQUIRES: every reference outlives the pipeline. `tenant_salt`: null when
  // --tenant-cache-salt is off, else it outlives the pipeline.
  RequestPipeline(PipelineOptions options, const PromptEncoder& encoder, Dispatcher& dispatcher,
                  const core::Clock& clock, RouterMetrics& metrics, WorkPool& pool,
                  const TenantSalt* tenant_salt = nullptr);

  // Answers one POST of `kind`. `req.body` is consumed.
  http::Awaitable<void> Serve(ApiKind kind, http::Request& req, http::ResponseWriter& w,
                              std::string request_id);

 private:
  // The stages, from parse to the dispatcher's answer.
  http::Awaitable<void> Run(RequestContext& ctx, http::Request& req, http::ResponseWriter& w);
  // The loop check: true when X-Infera-Via says the request already passed through this
  // router (logged, counted); else sets ctx.via, the value it goes upstream with.
  bool PassedHere(RequestContext& ctx, const http::Headers& headers);
  // The cache_salt the worker gets: the client's, or with --tenant-cache-salt its
  // tenant's (nullopt: none). InvalidArgument for a bad X-Data-Parallel-Rank or a
  // tenant header given twice.
  absl::StatusOr<std::optional<std::string>> SaltFor(const ApiRequest& api,
                                                     const http::Headers& headers) const;
  // ctx.upstream_path and ctx.upstream_body (`translated`: the chat body of a
  // /v1/messages request), with `salt` set in the body; `req.body` is consumed.
  http::Awaitable<void> SetUpstreamBody(RequestContext& ctx, http::Request& req,
                                        std::string translated,
                                        const std::optional<std::string>& salt);
  // Answers a request whose stages threw.
  http::Awaitable<void> Fail(RequestContext& ctx, http::ResponseWriter& w,
                             std::exception_ptr error);
  double SecondsSince(int64_t start_ns) const { return (clock_.NowNs() - start_ns) * 1e-9; }

  PipelineOptions options_;
  const PromptEncoder& encoder_;
  Dispatcher& dispatcher_;
  const core::Clock& clock_;
  RouterMetrics& metrics_;
  WorkPool& pool_;
  const TenantSalt* const tenant_salt_;
};

}  // namespace infera::router
