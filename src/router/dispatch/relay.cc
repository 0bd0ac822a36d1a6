#include "router/dispatch/relay.h"

#include "router/dispatch/sse_framer.h"
#include "router/log_limiter.h"
#include "router/metrics/router_metrics.h"
#include "router/request/api_errors.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

// A non-streamed answer up to this size is sent whole with Content-Length (and a
// failure while reading it is still a clean 502); a longer one is relayed as it
// arrives, chunked.
constexpr size_t kSendWholeBytes = 1u << 20;

void CountCut(const RequestContext& ctx, const char* reason) {
  if (ctx.relay.metrics != nullptr) ctx.relay.metrics->CountRelayCut(reason);
}

// A worker failed after its answer began: one line per second at most (the client's
// error names no worker; this line does, with the request id).
void WarnMidAnswer(const RequestContext& ctx, const std::string& worker_id, std::string_view what) {
  static LogLimiter log;
  if (uint64_t skipped = 0; log.Allow(&skipped)) {
    spdlog::warn("request {}: worker {} {} ({} more in the last second not logged)", ctx.request_id,
                 worker_id, what, skipped);
  }
}

// A read that failed because the client left (or its exchange was cancelled for that).
bool ClientLeft(const http::ResponseWriter& w, const absl::Status& failed) {
  return w.client_gone() || failed.code() == absl::StatusCode::kCancelled;
}

// The in-band error event of a stream: one whole SSE event of its own.
std::string ErrorEvent(ResponseTransform* transform, const std::string& message) {
  return transform != nullptr ? transform->ErrorEvent(message)
                              : "data: " + OpenAiErrorBody(502, message, nullptr) + "\n\n";
}

// The answer's first byte goes to the client now (the fleet view's time to first byte).
void MarkFirstByte(RequestContext& ctx) {
  if (ctx.first_byte_ns == 0 && ctx.relay.clock != nullptr)
    ctx.first_byte_ns = ctx.relay.clock->NowNs();
}

// The worker's Content-Type, application/json when it named none.
std::string ContentTypeOf(const UpstreamResponse& response) {
  std::string_view content_type = response.headers().Get("Content-Type");
  return content_type.empty() ? "application/json" : std::string(content_type);
}

// Writes the in-band error `event` after what was forwarded and ends the stream.
http::Awaitable<void> EndStreamWith(http::ResponseWriter& w, std::string event) {
  co_await w.WriteChunk(event);
  co_await w.EndStream();
}

}  // namespace

// One answer being relayed: what Run was given.
struct Relay::Exchange {
  RequestContext& ctx;
  UpstreamResponse& response;
  const std::string& worker_id;
  ResponseTransform* transform;
  http::ResponseWriter& w;
  RelayFeedback* feedback;
  bool probe = false;  // the body's usage goes to feedback->usage (Whole)

  // The client left (a write failed or a read was cancelled for it): 499, the
  // exchange upstream cancelled.
  void ClientGone() {
    response.Cancel();
    ctx.End(Outcome::kCancelled, 499);
  }
  // True (and 499) when `failed` is the client leaving rather than the worker failing.
  bool EndedByClient(const absl::Status& failed) {
    if (!ClientLeft(w, failed)) return false;
    ctx.End(Outcome::kCancelled, 499);
    return true;
  }
};

http::Awaitable<void> Relay::Run(RequestContext& ctx, UpstreamResponse& response,
                                 const std::string& worker_id, ResponseTransform* transform,
                                 http::ResponseWriter& w, RelayFeedback* feedback) {
  http::Headers out;
  out.Add("X-Infera-Request-Id", ctx.request_id);
  out.Add("X-Infera-Worker-Id", worker_id);
  if (!ctx.route_receipt.empty()) out.Add("X-Infera-Route", ctx.route_receipt);
  const bool sse = response.headers().Get("Content-Type").starts_with("text/event-stream");
  ctx.status = response.status();
  Exchange x{ctx, response, worker_id, transform, w, feedback};
  if (response.status() != 200 || !sse) {
    co_await Whole(x, std::move(out));
  } else {
    co_await Stream(x, std::move(out));
  }
}

http::Awaitable<void> Relay::Whole(Exchange& x, http::Headers out) {
  RequestContext& ctx = x.ctx;
  const int status = x.response.status();
  if (status >= 400) ctx.outcome = Outcome::kClientError;
  x.probe = x.feedback != nullptr && x.feedback->probe_usage && status == 200;
  // A translated answer is read whole (the translation needs all of it), bounded; the
  // worker's own bytes are held only up to kSendWholeBytes.
  const size_t hold = x.transform != nullptr ? ctx.relay.max_translated_bytes : kSendWholeBytes;
  std::string body;
  bool ended = false;
  absl::Status failed;
  while (body.size() <= hold) {
    auto piece = co_await x.response.Read();
    if (!piece.ok()) {
      failed = piece.status();
      break;
    }
    if (!piece->has_value()) {
      ended = true;
      break;
    }
    body += **piece;
  }
  if (!failed.ok()) {
    if (x.EndedByClient(failed)) co_return;
    const bool timeout = failed.code() == absl::StatusCode::kDeadlineExceeded;
    WarnMidAnswer(ctx, x.worker_id, "failed mid-response: " + std::string(failed.message()));
    ctx.End(timeout ? Outcome::kTimeout : Outcome::kUpstreamError, timeout ? 504 : 502);
    co_await SendError(
        x.w, ctx.kind, ctx.status,
        timeout ? "the worker did not finish its answer in time" : "the worker failed mid-response",
        ctx.request_id);
    co_return;
  }
  if (ended) {
    if (x.probe) x.feedback->usage.Whole(body);
    if (x.transform != nullptr) {
      body = x.transform->Whole(status, std::move(body));
      out.Add("Content-Type", "application/json");
    } else {
      out.Add("Content-Type", ContentTypeOf(x.response));
    }
    MarkFirstByte(ctx);
    co_await x.w.Send(status, std::move(out), std::move(body));
    if (x.w.client_gone()) ctx.outcome = Outcome::kCancelled;
    co_return;
  }
  if (x.transform != nullptr) {
    // Too large to translate: nothing was sent yet, so a clean error.
    x.response.Cancel();
    CountCut(ctx, "translated_body_too_large");
    WarnMidAnswer(ctx, x.worker_id,
                  "answered more than --max-translated-response-bytes " +
                      std::to_string(ctx.relay.max_translated_bytes));
    ctx.End(Outcome::kUpstreamError, 502);
    co_await SendError(x.w, ctx.kind, 502,
                       "the worker's answer is larger than the router translates (" +
                           std::to_string(ctx.relay.max_translated_bytes) + " bytes)",
                       ctx.request_id);
    co_return;
  }
  co_await Chunked(x, std::move(body), std::move(out));
}

http::Awaitable<void> Relay::Chunked(Exchange& x, std::string head, http::Headers out) {
  RequestContext& ctx = x.ctx;
  out.Add("Content-Type", ContentTypeOf(x.response));
  if (!co_await x.w.BeginStream(x.response.status(), std::move(out))) {
    x.ClientGone();
    co_return;
  }
  if (x.probe) x.feedback->usage.BodyPiece(head);
  MarkFirstByte(ctx);
  if (!co_await x.w.WriteChunk(head)) {
    x.ClientGone();
    co_return;
  }
  head = std::string();
  while (true) {
    auto piece = co_await x.response.Read();
    if (!piece.ok()) {
      if (x.EndedByClient(piece.status())) co_return;
      // The head is out: the body is cut without its last chunk, so the client sees
      // an incomplete answer rather than a complete-looking truncated one.
      WarnMidAnswer(ctx, x.worker_id,
                    "failed mid-response: " + std::string(piece.status().message()));
      ctx.outcome = Outcome::kUpstreamError;
      co_return;
    }
    if (!piece->has_value()) break;
    if (x.probe) x.feedback->usage.BodyPiece(**piece);
    if (!co_await x.w.WriteChunk(**piece)) {
      x.ClientGone();
      co_return;
    }
  }
  if (x.probe) x.feedback->usage.FinishBody();
  co_await x.w.EndStream();
  if (x.w.client_gone()) ctx.outcome = Outcome::kCancelled;
}

std::string Relay::StreamFailure(Exchange& x, const SseFramer& framer,
                                 const std::string& client_message, const std::string& detail) {
  WarnMidAnswer(x.ctx, x.worker_id,
                detail + "; an incomplete event of " + std::to_string(framer.pending_bytes()) +
                    " bytes dropped");
  x.ctx.outcome = Outcome::kUpstreamError;
  return ErrorEvent(x.transform, client_message);
}

http::Awaitable<void> Relay::Stream(Exchange& x, http::Headers out) {
  RequestContext& ctx = x.ctx;
  out.Add("Content-Type", "text/event-stream");
  out.Add("Cache-Control", "no-cache");
  if (!co_await x.w.BeginStream(200, std::move(out))) {
    x.ClientGone();
    co_return;
  }
  ctx.streaming = true;
  bool first_byte = true;
  SseFramer framer(ctx.relay.max_sse_event_bytes);
  std::string events;
  while (true) {
    auto piece = co_await x.response.Read();
    if (!piece.ok()) {
      if (x.EndedByClient(piece.status())) co_return;
      // After the first byte: report in-band (whole events only: a partial event never
      // reaches the client), then end the stream.
      const std::string cause = ClientMessage(piece.status());
      // (The event is a named local: g++ 12 mis-handles a conditional's temporaries
      // inside a co_await expression.)
      std::string event = StreamFailure(
          x, framer,
          cause.empty() ? "the worker failed mid-stream" : "the worker failed mid-stream: " + cause,
          "failed mid-stream: " + std::string(piece.status().message()));
      co_await EndStreamWith(x.w, std::move(event));
      co_return;
    }
    if (!piece->has_value()) {
      if (framer.pending_bytes() > 0) {
        // The body ended inside an event: the worker's stream was cut.
        std::string event = StreamFailure(x, framer, "the worker's stream ended inside an event",
                                          "ended its stream inside an event");
        co_await EndStreamWith(x.w, std::move(event));
        co_return;
      }
      if (x.transform != nullptr) co_await x.w.WriteChunk(x.transform->Finish());
      co_await x.w.EndStream();
      co_return;
    }
    RelayFeedback* feedback = x.feedback;
    if (feedback != nullptr && first_byte && !(*piece)->empty() && feedback->guards != nullptr) {
      feedback->guards->PrefillDone();  // the first token: no longer pending prefill
      first_byte = false;
    }
    events.clear();
    const bool within = framer.Feed(**piece, events);
    if (!events.empty()) {
      if (feedback != nullptr && feedback->probe_usage) feedback->usage.Chunk(events);
      MarkFirstByte(ctx);
      const bool ok = x.transform != nullptr ? co_await x.w.WriteChunk(x.transform->Chunk(events))
                                             : co_await x.w.WriteChunk(events);
      if (!ok) {
        x.ClientGone();  // abort the generation upstream
        co_return;
      }
    }
    if (!within) {
      x.response.Cancel();
      CountCut(ctx, "sse_event_too_large");
      ctx.outcome = Outcome::kUpstreamError;
      WarnMidAnswer(ctx, x.worker_id,
                    "sent an SSE event over --max-sse-event-bytes " +
                        std::to_string(framer.max_event_bytes()) + "; stream ended");
      std::string event =
          ErrorEvent(x.transform, "the worker sent an event larger than " +
                                      std::to_string(framer.max_event_bytes()) + " bytes");
      co_await EndStreamWith(x.w, std::move(event));
      co_return;
    }
  }
}

}  // namespace infera::router
