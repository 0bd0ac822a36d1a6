// RequestPipeline: one inference request from parse to stats (doc/router-pipeline.md).
//
//   ParseApiRequest (400 on bad input) -> the cache_salt (the client's, or with
//   --tenant-cache-salt its tenant's, TenantSalt) -> the upstream body (Anthropic:
//   translated to chat; the salt set in it) -> PromptEncoder (tokens; a large prompt on the
//   encoder's pool) -> the answer's transform (Anthropic: AnthropicTransform, told the prompt's
//   tokens) -> Dispatcher (plan, send, fail over, relay, release) -> metrics.
// The request never goes back a stage. The simdjson parse of the body is used by the
// encoder before the first suspension point (it lives in the thread's parser).
// Whatever a stage throws is caught here: 500 in the API's error shape (in-band once
// streaming), outcome router_error, counted, the in-flight gauge back down.
//
// Thread-safety: Serve runs on the connection's loop; one pipeline serves all loops.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "core/clock.h"
#include "http/server.h"
#include "router/api_request.h"
#include "router/dispatcher.h"
#include "router/prompt_encoder.h"
#include "router/router_metrics.h"
#include "router/tenant_salt.h"

namespace infera::router {

class RequestPipeline {
 public:
  // REQUIRES: every reference outlives the pipeline. `tenant_salt`: null when
  // --tenant-cache-salt is off, else it outlives the pipeline.
  RequestPipeline(int64_t request_timeout_ms, const PromptEncoder& encoder, Dispatcher& dispatcher,
                  const core::Clock& clock, RouterMetrics& metrics,
                  const TenantSalt* tenant_salt = nullptr);

  // Answers one POST of `kind`. `req.body` is consumed.
  http::Awaitable<void> Serve(ApiKind kind, http::Request& req, http::ResponseWriter& w,
                              std::string request_id);

 private:
  // The stages, from parse to the dispatcher's answer.
  http::Awaitable<void> Run(RequestContext& ctx, http::Request& req, http::ResponseWriter& w);
  // Answers a request whose stages threw.
  http::Awaitable<void> Fail(RequestContext& ctx, http::ResponseWriter& w,
                             std::exception_ptr error);
  double SecondsSince(int64_t start_ns) const { return (clock_.NowNs() - start_ns) * 1e-9; }

  const int64_t request_timeout_ms_;
  const PromptEncoder& encoder_;
  Dispatcher& dispatcher_;
  const core::Clock& clock_;
  RouterMetrics& metrics_;
  const TenantSalt* const tenant_salt_;
};

}  // namespace infera::router
