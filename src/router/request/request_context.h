// RequestContext: one client request as it walks the pipeline (doc/router-pipeline.md).
//
// ApiFront creates it, RequestPipeline fills the parsed request, the upstream body and
// the tokens, a Dispatcher sends it and a Relay answers the client; each stage
// writes only its own fields. `outcome` and `status` are what the request ended as
// (metrics: infera_request_duration_seconds{outcome}, infera_router_requests_total).
//
// Thread-safety: none; a request lives on one event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/hashing.h"
#include "core/types.h"
#include "http/client.h"
#include "router/request/api_request.h"
#include "router/request/response_transform.h"

namespace infera::router {

// How a request ended (the `outcome` label).
enum class Outcome : uint8_t {
  kSuccess,
  kClientError,    // 4xx: bad input, unknown model, or a worker's 4xx relayed
  kCancelled,      // the client went away (status 499)
  kTimeout,        // the deadline passed (504, or in-band after the first byte)
  kUpstreamError,  // the worker failed (502, or in-band after the first byte)
  kNoWorker,       // nothing could serve it (503)
  kRouterError,    // the router itself failed: an exception (500), its own descriptors
                   // or buffers ran out (503)
};
inline constexpr size_t kOutcomeCount = 7;

// "success", "client_error", "cancelled", "timeout", "upstream_error", "no_worker",
// "router_error".
const char* OutcomeName(Outcome outcome);

class RouterMetrics;

// How much of a worker's answer the relay may hold at once (doc/router.md "Streaming
// relay"); RequestPipeline sets them from the flags.
struct RelayLimits {
  size_t max_sse_event_bytes = 16u << 20;   // --max-sse-event-bytes
  size_t max_translated_bytes = 16u << 20;  // --max-translated-response-bytes
  RouterMetrics* metrics = nullptr;         // infera_router_relay_cut_total (null: none)
  const core::Clock* clock = nullptr;       // stamps first_byte_ns (null: not stamped)
};

struct RequestContext {
  std::string request_id;  // the client's X-Infera-Request-Id, or a generated one
  ApiKind kind = ApiKind::kChat;
  ApiRequest api;  // the parsed body

  // What the worker receives before per-leg rewrites (data_parallel_rank, PD fields).
  std::string upstream_path;  // "/v1/chat/completions" or "/v1/completions"
  std::string upstream_body;
  std::string authorization;  // the client's Authorization header, forwarded
  // Re-shapes the answer for the client's API; null: the worker's bytes as they are.
  std::unique_ptr<ResponseTransform> transform;
  RelayLimits relay;
  // The X-Infera-Via value sent upstream: the client's hops and this router's id
  // (ApiFront's loop detection; empty in tests that build a context by hand).
  std::string via;

  // The prompt's token ids: the client's, or rendered and tokenized; nullopt: the
  // bytes/4 estimate in api.estimated_tokens sizes it.
  std::optional<std::vector<core::TokenId>> tokens;
  // The extra keys the prompt's blocks hash with (doc/hashing.md "Extra keys"): the
  // salt of the cache_salt the worker receives (the client's, or its tenant's with
  // --tenant-cache-salt); the adapter when the plan finds `model` is a LoRA adapter.
  core::HashKeys hash_keys{};

  // Times on the router's injected clock.
  int64_t start_ns = 0;
  int64_t deadline_ns = 0;  // start + --request-timeout-ms
  double parse_s = 0;       // stage durations, observed at the first pick
  double tokenize_s = 0;

  // Cancels the upstream exchange when the client disconnects.
  std::shared_ptr<http::Cancellation> cancel;
  // The admission queue (doc/admission.md): called once, after the request's first plan
  // (the bound request's load is booked; the next one may bind); empty: not queued.
  std::function<void()> on_planned;

  // --route-receipt: the X-Infera-Route value of the last plan (FormatRouteReceipt);
  // empty: the header is not sent.
  std::string route_receipt;
  // When the answer's first byte went to the client (stream: its first event; whole
  // answer: the answer); 0: none yet. The fleet view's time to first byte.
  int64_t first_byte_ns = 0;

  Outcome outcome = Outcome::kSuccess;
  int status = 200;        // the status the client got (499: it went away)
  bool streaming = false;  // the answer is a chunked stream whose head was sent

  // Sets how the request ended.
  void End(Outcome o, int s) {
    outcome = o;
    status = s;
  }
};

}  // namespace infera::router
