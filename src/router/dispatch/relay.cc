#include "router/dispatch/relay.h"

#include "router/request/api_errors.h"
#include "router/log_limiter.h"
#include "router/metrics/router_metrics.h"
#include "router/dispatch/sse_framer.h"
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

}  // namespace

http::Awaitable<void> Relay::Run(RequestContext& ctx, UpstreamResponse& response,
                                 const std::string& worker_id, ResponseTransform* transform,
                                 http::ResponseWriter& w, RelayFeedback* feedback) {
  http::Headers out;
  out.Add("X-Infera-Request-Id", ctx.request_id);
  out.Add("X-Infera-Worker-Id", worker_id);
  if (!ctx.route_receipt.empty()) out.Add("X-Infera-Route", ctx.route_receipt);
  const bool sse = response.headers().Get("Content-Type").starts_with("text/event-stream");
  ctx.status = response.status();
  if (response.status() != 200 || !sse) {
    co_await Whole(ctx, response, worker_id, transform, std::move(out), w, feedback);
  } else {
    co_await Stream(ctx, response, worker_id, transform, std::move(out), w, feedback);
  }
}

http::Awaitable<void> Relay::Whole(RequestContext& ctx, UpstreamResponse& response,
                                   const std::string& worker_id, ResponseTransform* transform,
                                   http::Headers out, http::ResponseWriter& w,
                                   RelayFeedback* feedback) {
  const int status = response.status();
  if (status >= 400) ctx.outcome = Outcome::kClientError;
  const bool probe = feedback != nullptr && feedback->probe_usage && status == 200;
  // A translated answer is read whole (the translation needs all of it), bounded; the
  // worker's own bytes are held only up to kSendWholeBytes.
  const size_t hold = transform != nullptr ? ctx.relay.max_translated_bytes : kSendWholeBytes;
  std::string body;
  bool ended = false;
  absl::Status failed;
  while (body.size() <= hold) {
    auto piece = co_await response.Read();
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
    if (ClientLeft(w, failed)) {
      ctx.End(Outcome::kCancelled, 499);
      co_return;
    }
    const bool timeout = failed.code() == absl::StatusCode::kDeadlineExceeded;
    WarnMidAnswer(ctx, worker_id, "failed mid-response: " + std::string(failed.message()));
    ctx.End(timeout ? Outcome::kTimeout : Outcome::kUpstreamError, timeout ? 504 : 502);
    co_await SendError(
        w, ctx.kind, ctx.status,
        timeout ? "the worker did not finish its answer in time" : "the worker failed mid-response",
        ctx.request_id);
    co_return;
  }
  if (ended) {
    if (probe) feedback->usage.Whole(body);
    if (transform != nullptr) {
      body = transform->Whole(status, std::move(body));
      out.Add("Content-Type", "application/json");
    } else {
      std::string_view content_type = response.headers().Get("Content-Type");
      out.Add("Content-Type",
              content_type.empty() ? "application/json" : std::string(content_type));
    }
    MarkFirstByte(ctx);
    co_await w.Send(status, std::move(out), std::move(body));
    if (w.client_gone()) ctx.outcome = Outcome::kCancelled;
    co_return;
  }
  if (transform != nullptr) {
    // Too large to translate: nothing was sent yet, so a clean error.
    response.Cancel();
    CountCut(ctx, "translated_body_too_large");
    WarnMidAnswer(ctx, worker_id,
                  "answered more than --max-translated-response-bytes " +
                      std::to_string(ctx.relay.max_translated_bytes));
    ctx.End(Outcome::kUpstreamError, 502);
    co_await SendError(w, ctx.kind, 502,
                       "the worker's answer is larger than the router translates (" +
                           std::to_string(ctx.relay.max_translated_bytes) + " bytes)",
                       ctx.request_id);
    co_return;
  }
  // A large body: relayed as it arrives (chunked); memory stays at one piece.
  std::string_view content_type = response.headers().Get("Content-Type");
  out.Add("Content-Type", content_type.empty() ? "application/json" : std::string(content_type));
  if (!co_await w.BeginStream(status, std::move(out))) {
    response.Cancel();
    ctx.End(Outcome::kCancelled, 499);
    co_return;
  }
  if (probe) feedback->usage.BodyPiece(body);
  MarkFirstByte(ctx);
  if (!co_await w.WriteChunk(body)) {
    response.Cancel();
    ctx.End(Outcome::kCancelled, 499);
    co_return;
  }
  body = std::string();
  while (true) {
    auto piece = co_await response.Read();
    if (!piece.ok()) {
      if (ClientLeft(w, piece.status())) {
        ctx.End(Outcome::kCancelled, 499);
        co_return;
      }
      // The head is out: the body is cut without its last chunk, so the client sees
      // an incomplete answer rather than a complete-looking truncated one.
      WarnMidAnswer(ctx, worker_id,
                    "failed mid-response: " + std::string(piece.status().message()));
      ctx.outcome = Outcome::kUpstreamError;
      co_return;
    }
    if (!piece->has_value()) break;
    if (probe) feedback->usage.BodyPiece(**piece);
    if (!co_await w.WriteChunk(**piece)) {
      response.Cancel();
      ctx.End(Outcome::kCancelled, 499);
      co_return;
    }
  }
  if (probe) feedback->usage.FinishBody();
  co_await w.EndStream();
  if (w.client_gone()) ctx.outcome = Outcome::kCancelled;
}

http::Awaitable<void> Relay::Stream(RequestContext& ctx, UpstreamResponse& response,
                                    const std::string& worker_id, ResponseTransform* transform,
                                    http::Headers out, http::ResponseWriter& w,
                                    RelayFeedback* feedback) {
  out.Add("Content-Type", "text/event-stream");
  out.Add("Cache-Control", "no-cache");
  if (!co_await w.BeginStream(200, std::move(out))) {
    response.Cancel();
    ctx.End(Outcome::kCancelled, 499);
    co_return;
  }
  ctx.streaming = true;
  bool first_byte = true;
  SseFramer framer(ctx.relay.max_sse_event_bytes);
  std::string events;
  // Ends the stream with an in-band error event after what was forwarded (whole
  // events only: a partial event never reaches the client), and logs `detail`.
  auto fail = [&](const std::string& client_message, const std::string& detail) {
    WarnMidAnswer(ctx, worker_id,
                  detail + "; an incomplete event of " + std::to_string(framer.pending_bytes()) +
                      " bytes dropped");
    ctx.outcome = Outcome::kUpstreamError;
    return ErrorEvent(transform, client_message);
  };
  while (true) {
    auto piece = co_await response.Read();
    if (!piece.ok()) {
      if (ClientLeft(w, piece.status())) {
        ctx.End(Outcome::kCancelled, 499);
        co_return;
      }
      // After the first byte: report in-band, then end the stream.
      const std::string cause = ClientMessage(piece.status());
      std::string event = fail(
          cause.empty() ? "the worker failed mid-stream" : "the worker failed mid-stream: " + cause,
          "failed mid-stream: " + std::string(piece.status().message()));
      co_await w.WriteChunk(event);
      co_await w.EndStream();
      co_return;
    }
    if (!piece->has_value()) {
      if (framer.pending_bytes() > 0) {
        // The body ended inside an event: the worker's stream was cut.
        std::string event =
            fail("the worker's stream ended inside an event", "ended its stream inside an event");
        co_await w.WriteChunk(event);
        co_await w.EndStream();
        co_return;
      }
      if (transform != nullptr) co_await w.WriteChunk(transform->Finish());
      co_await w.EndStream();
      co_return;
    }
    if (feedback != nullptr && first_byte && !(*piece)->empty() && feedback->guards != nullptr) {
      feedback->guards->PrefillDone();  // the first token: no longer pending prefill
      first_byte = false;
    }
    events.clear();
    const bool within = framer.Feed(**piece, events);
    if (!events.empty()) {
      if (feedback != nullptr && feedback->probe_usage) feedback->usage.Chunk(events);
      MarkFirstByte(ctx);
      const bool ok = transform != nullptr ? co_await w.WriteChunk(transform->Chunk(events))
                                           : co_await w.WriteChunk(events);
      if (!ok) {
        response.Cancel();  // the client is gone: abort the generation upstream
        ctx.End(Outcome::kCancelled, 499);
        co_return;
      }
    }
    if (!within) {
      response.Cancel();
      CountCut(ctx, "sse_event_too_large");
      ctx.outcome = Outcome::kUpstreamError;
      WarnMidAnswer(ctx, worker_id,
                    "sent an SSE event over --max-sse-event-bytes " +
                        std::to_string(framer.max_event_bytes()) + "; stream ended");
      std::string event =
          ErrorEvent(transform, "the worker sent an event larger than " +
                                    std::to_string(framer.max_event_bytes()) + " bytes");
      co_await w.WriteChunk(event);
      co_await w.EndStream();
      co_return;
    }
  }
}

}  // namespace infera::router
