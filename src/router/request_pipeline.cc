#include "router/request_pipeline.h"

#include <optional>

#include "router/anthropic.h"
#include "router/anthropic_transform.h"
#include "router/api_errors.h"
#include "router/request_context.h"

namespace infera::router {

RequestPipeline::RequestPipeline(int64_t request_timeout_ms, const PromptEncoder& encoder,
                                 Dispatcher& dispatcher, const core::Clock& clock,
                                 RouterMetrics& metrics)
    : request_timeout_ms_(request_timeout_ms),
      encoder_(encoder),
      dispatcher_(dispatcher),
      clock_(clock),
      metrics_(metrics) {}

http::Awaitable<void> RequestPipeline::Serve(ApiKind kind, http::Request& req,
                                             http::ResponseWriter& w, std::string request_id) {
  RequestContext ctx;
  ctx.start_ns = clock_.NowNs();
  ctx.kind = kind;
  ctx.request_id = std::move(request_id);
  metrics_.RequestStarted();

  // One parse serves validation and the chat template.
  std::optional<simdjson::dom::element> dom;
  auto parsed = ParseApiRequest(kind, req.body, &dom);
  ctx.parse_s = SecondsSince(ctx.start_ns);
  if (!parsed.ok()) {
    ctx.End(Outcome::kClientError, 400);
    co_await SendError(w, kind, 400, std::string(parsed.status().message()), ctx.request_id);
    metrics_.RequestEnded(kind, ctx.status, ctx.outcome, SecondsSince(ctx.start_ns));
    co_return;
  }
  ctx.api = std::move(*parsed);

  // What goes upstream, and how the answer comes back.
  ctx.upstream_path = kind == ApiKind::kCompletions ? "/v1/completions" : "/v1/chat/completions";
  if (kind == ApiKind::kMessages) {
    ctx.upstream_body = AnthropicToChat(ctx.api.body).dump();
    ctx.transform = std::make_unique<AnthropicTransform>(ctx.api.model, ctx.request_id);
  } else {
    ctx.upstream_body = std::move(req.body);
  }
  ctx.authorization = std::string(req.headers.Get("Authorization"));

  const int64_t tok_start_ns = clock_.NowNs();
  encoder_.Encode(ctx, dom);
  ctx.tokenize_s = SecondsSince(tok_start_ns);

  ctx.cancel = std::make_shared<http::Cancellation>();
  w.OnClientGone([cancel = ctx.cancel] { cancel->Cancel(); });
  ctx.deadline_ns = clock_.NowNs() + request_timeout_ms_ * 1'000'000;

  co_await dispatcher_.Dispatch(ctx, w);
  metrics_.RequestEnded(kind, ctx.status, ctx.outcome, SecondsSince(ctx.start_ns));
}

}  // namespace infera::router
