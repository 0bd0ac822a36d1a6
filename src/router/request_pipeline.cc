#include "router/request_pipeline.h"

#include <exception>
#include <optional>

#include "router/anthropic.h"
#include "router/anthropic_transform.h"
#include "router/api_errors.h"
#include "router/request_context.h"
#include "spdlog/spdlog.h"

namespace infera::router {

namespace {

// The tenant of a request: the value of `header`, nullopt when absent; a header given
// twice is refused (which one a gateway in front authenticated is unknown).
absl::StatusOr<std::optional<std::string_view>> TenantOf(const http::Headers& headers,
                                                         const std::string& header) {
  std::optional<std::string_view> tenant;
  for (const http::Headers::Field& f : headers.fields()) {
    if (!http::Headers::EqualsIgnoreCase(f.name, header)) continue;
    if (tenant) return absl::InvalidArgumentError("header " + header + " is given more than once");
    tenant = f.value;
  }
  return tenant;
}

}  // namespace

RequestPipeline::RequestPipeline(int64_t request_timeout_ms, const PromptEncoder& encoder,
                                 Dispatcher& dispatcher, const core::Clock& clock,
                                 RouterMetrics& metrics, const TenantSalt* tenant_salt)
    : request_timeout_ms_(request_timeout_ms),
      encoder_(encoder),
      dispatcher_(dispatcher),
      clock_(clock),
      metrics_(metrics),
      tenant_salt_(tenant_salt) {}

http::Awaitable<void> RequestPipeline::Serve(ApiKind kind, http::Request& req,
                                             http::ResponseWriter& w, std::string request_id) {
  RequestContext ctx;
  ctx.start_ns = clock_.NowNs();
  ctx.kind = kind;
  ctx.request_id = std::move(request_id);
  metrics_.RequestStarted();
  // No exception leaves a request unaccounted: whatever a stage throws (a library
  // on input it did not expect, bad_alloc), the client gets a 500 in its API's shape
  // (or an in-band error once streaming), and the request is counted and leaves the
  // in-flight gauge. A handler cannot co_await inside a catch block, hence the two
  // steps.
  std::exception_ptr error;
  try {
    co_await Run(ctx, req, w);
  } catch (...) {
    error = std::current_exception();
  }
  if (error) {
    try {
      co_await Fail(ctx, w, error);
    } catch (...) {
      ctx.End(Outcome::kRouterError, 500);  // the answer could not be written
    }
  }
  metrics_.RequestEnded(kind, ctx.status, ctx.outcome, SecondsSince(ctx.start_ns));
}

http::Awaitable<void> RequestPipeline::Run(RequestContext& ctx, http::Request& req,
                                           http::ResponseWriter& w) {
  const ApiKind kind = ctx.kind;
  // One parse serves validation and the chat template.
  std::optional<simdjson::dom::element> dom;
  absl::StatusOr<ApiRequest> parsed = ParseApiRequest(kind, req.body, &dom);
  if (parsed.ok()) {
    if (absl::Status s = CheckClientDpRankHeader(req.headers.Get("X-Data-Parallel-Rank"));
        !s.ok()) {
      parsed = s;
    }
  }
  // The salt the worker gets: the client's, or its tenant's (doc/router.md "Tenant
  // isolation").
  std::optional<std::string> salt;
  if (parsed.ok()) {
    salt = parsed->cache_salt;
    if (tenant_salt_ != nullptr) {
      auto tenant = TenantOf(req.headers, tenant_salt_->header());
      if (tenant.ok()) {
        salt = tenant_salt_->Derive(*tenant, parsed->cache_salt);
      } else {
        parsed = tenant.status();
      }
    }
  }
  ctx.parse_s = SecondsSince(ctx.start_ns);
  if (!parsed.ok()) {
    ctx.End(Outcome::kClientError, 400);
    co_await SendError(w, kind, 400, std::string(parsed.status().message()), ctx.request_id);
    co_return;
  }
  ctx.api = std::move(*parsed);

  // What goes upstream.
  ctx.upstream_path = kind == ApiKind::kCompletions ? "/v1/completions" : "/v1/chat/completions";
  if (kind == ApiKind::kMessages) {
    nlohmann::json chat = AnthropicToChat(ctx.api.body);
    if (salt) chat["cache_salt"] = *salt;
    ctx.upstream_body = chat.dump();
  } else if (tenant_salt_ != nullptr) {
    ctx.upstream_body =
        WithCacheSalt(std::move(req.body), *salt, /*body_has_salt=*/ctx.api.has_cache_salt_key);
  } else {
    ctx.upstream_body = std::move(req.body);
  }
  if (salt) ctx.hash_keys.salt = core::KeyDigest(*salt);
  ctx.authorization = std::string(req.headers.Get("Authorization"));
  // The body's session_id / prompt_cache_key first (ApiRequest), then the header.
  if (ctx.api.session_id.empty()) ctx.api.session_id = req.headers.Get("X-Session-Id");

  const int64_t tok_start_ns = clock_.NowNs();
  co_await encoder_.Encode(ctx, dom);
  ctx.tokenize_s = SecondsSince(tok_start_ns);
  if (w.client_gone()) {  // left while its prompt was tokenized on the pool
    ctx.End(Outcome::kCancelled, 499);
    co_return;
  }
  // How the answer comes back; Anthropic's message_start reports the prompt's size.
  if (kind == ApiKind::kMessages) {
    const size_t input_tokens = ctx.tokens ? ctx.tokens->size() : ctx.api.estimated_tokens;
    ctx.transform = std::make_unique<AnthropicTransform>(ctx.api.model, ctx.request_id,
                                                         static_cast<int64_t>(input_tokens));
  }

  ctx.cancel = std::make_shared<http::Cancellation>();
  w.OnClientGone([cancel = ctx.cancel] { cancel->Cancel(); });
  ctx.deadline_ns = clock_.NowNs() + request_timeout_ms_ * 1'000'000;

  co_await dispatcher_.Dispatch(ctx, w);
}

http::Awaitable<void> RequestPipeline::Fail(RequestContext& ctx, http::ResponseWriter& w,
                                            std::exception_ptr error) {
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  // The exception's text stays in the log: it may quote library internals.
  spdlog::error("request {}: internal error: {}", ctx.request_id, what);
  // The status the client got: 500, or the streamed answer's head already sent.
  ctx.End(Outcome::kRouterError, w.started() ? ctx.status : 500);
  const std::string message = "internal error in the router (request " + ctx.request_id + ")";
  if (!w.started()) {
    co_await SendError(w, ctx.kind, 500, message, ctx.request_id);
  } else if (ctx.streaming && !w.finished() && !w.failed()) {
    // Streaming: the head is out; report in-band and end the stream.
    std::string event = ctx.transform != nullptr
                            ? ctx.transform->ErrorEvent(message)
                            : "data: " + OpenAiErrorBody(500, message, nullptr) + "\n\n";
    co_await w.WriteChunk(event);
    co_await w.EndStream();
  }
}

}  // namespace infera::router
