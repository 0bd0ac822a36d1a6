// Relay: answers the client from a worker's response that passed the failover gate
// (the head arrived with a status below 500).
//
//   SSE 200: relayed chunk by chunk as it arrives (chunked encoding), nothing
//   buffered; a failure after the first byte becomes an in-band error event and the
//   stream ends; a client that goes away cancels the upstream exchange.
//   anything else: read whole, sent with Content-Length (4xx count as client_error).
// With a ResponseTransform (Anthropic clients) bodies and events are re-shaped;
// without one the worker's bytes pass through untouched.
//
// With a RelayFeedback the relay also tells the dispatcher what it saw: the stream's
// first body byte (the first token: PickGuards::PrefillDone) and the worker's
// reported cached tokens (UsageProbe, from the worker's bytes before any transform).
//
// Sets ctx.outcome and ctx.status. Thread-safety: runs on the request's loop.
#pragma once

#include <string>

#include "http/server.h"
#include "router/dispatch/sse_framer.h"
#include "router/dispatch/upstream.h"
#include "router/dispatch/usage_probe.h"
#include "router/plan/pick_guards.h"
#include "router/request/request_context.h"
#include "router/request/response_transform.h"

namespace infera::router {

// What the dispatcher learns from the answer while it is relayed.
struct RelayFeedback {
  PickGuards* guards = nullptr;  // PrefillDone() at the first body byte of a stream
  UsageProbe usage;              // usage.prompt_tokens_details.cached_tokens, if reported
  bool probe_usage = true;       // false: `usage` is not read (no JSON work for it)
};

class Relay {
 public:
  // `transform` may be null (pass-through); so may `feedback`.
  static http::Awaitable<void> Run(RequestContext& ctx, UpstreamResponse& response,
                                   const std::string& worker_id, ResponseTransform* transform,
                                   http::ResponseWriter& w, RelayFeedback* feedback = nullptr);

 private:
  struct Exchange;  // one answer being relayed (relay.cc)
  // A non-SSE answer (or a status other than 200): read whole, sent with Content-Length;
  // one over kSendWholeBytes (untranslated) is relayed chunked.
  static http::Awaitable<void> Whole(Exchange& x, http::Headers out);
  // The rest of a large answer whose first `head` bytes were read, chunked as it arrives.
  static http::Awaitable<void> Chunked(Exchange& x, std::string head, http::Headers out);
  // An SSE 200: whole events as they arrive.
  static http::Awaitable<void> Stream(Exchange& x, http::Headers out);
  // A stream that failed after its head: logs `detail`, counts the outcome, and
  // returns the in-band error event with `client_message`.
  static std::string StreamFailure(Exchange& x, const SseFramer& framer,
                                   const std::string& client_message, const std::string& detail);
};

}  // namespace infera::router
