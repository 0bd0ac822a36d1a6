#include "router/relay.h"

#include "router/api_errors.h"

namespace infera::router {

http::Awaitable<void> Relay::Run(RequestContext& ctx, UpstreamResponse& response,
                                 const std::string& worker_id, ResponseTransform* transform,
                                 http::ResponseWriter& w, RelayFeedback* feedback) {
  http::Headers out;
  out.Add("X-Infera-Request-Id", ctx.request_id);
  out.Add("X-Infera-Worker-Id", worker_id);
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
  auto body_or = co_await response.ReadAll(1ull << 30);
  if (!body_or.ok()) {
    if (w.client_gone() || body_or.status().code() == absl::StatusCode::kCancelled) {
      ctx.End(Outcome::kCancelled, 499);
    } else {
      const bool timeout = body_or.status().code() == absl::StatusCode::kDeadlineExceeded;
      ctx.End(timeout ? Outcome::kTimeout : Outcome::kUpstreamError, timeout ? 504 : 502);
      co_await SendError(w, ctx.kind, ctx.status,
                         "worker " + worker_id +
                             " failed mid-response: " + std::string(body_or.status().message()),
                         ctx.request_id);
    }
    co_return;
  }
  std::string body = std::move(*body_or);
  if (feedback != nullptr && status == 200) feedback->usage.Whole(body);
  if (transform != nullptr) {
    body = transform->Whole(status, std::move(body));
    out.Add("Content-Type", "application/json");
  } else {
    std::string_view content_type = response.headers().Get("Content-Type");
    out.Add("Content-Type", content_type.empty() ? "application/json" : std::string(content_type));
  }
  if (status >= 400) ctx.outcome = Outcome::kClientError;
  co_await w.Send(status, std::move(out), std::move(body));
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
  while (true) {
    auto piece = co_await response.Read();
    if (!piece.ok()) {
      if (w.client_gone() || piece.status().code() == absl::StatusCode::kCancelled) {
        ctx.End(Outcome::kCancelled, 499);
        co_return;
      }
      // After the first byte: report in-band, then end the stream.
      ctx.outcome = Outcome::kUpstreamError;
      std::string msg =
          "worker " + worker_id + " failed mid-stream: " + std::string(piece.status().message());
      // A named string, not a conditional inside co_await: g++ 12 mis-handles the
      // temporaries of a conditional expression across a suspension point.
      std::string event = transform != nullptr
                              ? transform->ErrorEvent(msg)
                              : "data: " + OpenAiErrorBody(502, msg, nullptr) + "\n\n";
      co_await w.WriteChunk(event);
      co_await w.EndStream();
      co_return;
    }
    if (!piece->has_value()) {
      if (transform != nullptr) co_await w.WriteChunk(transform->Finish());
      co_await w.EndStream();
      co_return;
    }
    if (feedback != nullptr) {
      if (first_byte && !(*piece)->empty() && feedback->guards != nullptr) {
        feedback->guards->PrefillDone();  // the first token: no longer pending prefill
        first_byte = false;
      }
      feedback->usage.Chunk(**piece);
    }
    const bool ok = transform != nullptr ? co_await w.WriteChunk(transform->Chunk(**piece))
                                         : co_await w.WriteChunk(**piece);
    if (!ok) {
      response.Cancel();  // the client is gone: abort the generation upstream
      ctx.End(Outcome::kCancelled, 499);
      co_return;
    }
  }
}

}  // namespace infera::router
