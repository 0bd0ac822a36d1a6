#include "router/request_pipeline.h"

#include <exception>
#include <optional>

#include "router/dispatch/admission_dispatcher.h"
#include "router/log_limiter.h"
#include "router/request/anthropic.h"
#include "router/request/anthropic_transform.h"
#include "router/request/api_errors.h"
#include "router/request/request_context.h"
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

// What parsing a body yields: the validated request and, for /v1/messages, the chat
// body the worker receives.
struct Parsed {
  absl::StatusOr<ApiRequest> api;
  std::string upstream_body;  // kMessages only
};

// Parse, validation and (kMessages) translation: on the loop for a small body, on
// the work pool for a large one (`dom` null there: its parse would live in the pool
// thread's parser).
Parsed ParseBody(ApiKind kind, const std::string& body,
                 std::optional<simdjson::dom::element>* dom) {
  Parsed out{ParseApiRequest(kind, body, dom), {}};
  if (out.api.ok() && kind == ApiKind::kMessages) {
    out.upstream_body = AnthropicToChat(out.api->body).dump();
    out.api->body = nlohmann::json();  // freed here, not on the loop at the request's end
  }
  return out;
}

}  // namespace

bool ViaIsLoop(std::string_view via, std::string_view router_id, size_t max_hops) {
  size_t hops = 0;
  while (!via.empty()) {
    const size_t comma = via.find(',');
    std::string_view hop = via.substr(0, comma);
    while (!hop.empty() && (hop.front() == ' ' || hop.front() == '\t')) hop.remove_prefix(1);
    while (!hop.empty() && (hop.back() == ' ' || hop.back() == '\t')) hop.remove_suffix(1);
    if (!hop.empty()) {
      if (hop == router_id || ++hops >= max_hops) return true;
    }
    if (comma == std::string_view::npos) break;
    via.remove_prefix(comma + 1);
  }
  return false;
}

RequestPipeline::RequestPipeline(PipelineOptions options, const PromptEncoder& encoder,
                                 Dispatcher& dispatcher, const core::Clock& clock,
                                 RouterMetrics& metrics, WorkPool& pool,
                                 const TenantSalt* tenant_salt)
    : options_(std::move(options)),
      encoder_(encoder),
      dispatcher_(dispatcher),
      clock_(clock),
      metrics_(metrics),
      pool_(pool),
      tenant_salt_(tenant_salt) {
  options_.relay.metrics = &metrics_;
  options_.relay.clock = &clock_;
}

http::Awaitable<void> RequestPipeline::Serve(ApiKind kind, http::Request& req,
                                             http::ResponseWriter& w, std::string request_id) {
  RequestContext ctx;
  ctx.start_ns = clock_.NowNs();
  ctx.kind = kind;
  ctx.request_id = std::move(request_id);
  metrics_.RequestStarted();
  metrics_.history().RequestStarted(ctx.start_ns);
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
  std::optional<double> ttft;
  if (ctx.first_byte_ns != 0) ttft = (ctx.first_byte_ns - ctx.start_ns) * 1e-9;
  metrics_.history().RequestEnded(clock_.NowNs(), ttft);
}

bool RequestPipeline::PassedHere(RequestContext& ctx, const http::Headers& headers) {
  // Every X-Infera-Via field, as one list.
  std::string via;
  for (const http::Headers::Field& f : headers.fields()) {
    if (!http::Headers::EqualsIgnoreCase(f.name, kViaHeader)) continue;
    if (!via.empty()) via += ", ";
    via += f.value;
  }
  if (ViaIsLoop(via, options_.router_id, options_.max_hops)) {
    metrics_.CountLoopDetected();
    static LogLimiter log;
    if (uint64_t skipped = 0; log.Allow(&skipped)) {
      spdlog::warn(
          "request {}: routing loop: it already passed through this router ({}: {}); a worker "
          "record points at a router ({} more in the last second not logged)",
          ctx.request_id, kViaHeader, via, skipped);
    }
    return true;
  }
  ctx.via = via.empty() ? options_.router_id : via + ", " + options_.router_id;
  return false;
}

absl::StatusOr<std::optional<std::string>> RequestPipeline::SaltFor(
    const ApiRequest& api, const http::Headers& headers) const {
  if (absl::Status s = CheckClientDpRankHeader(headers.Get("X-Data-Parallel-Rank")); !s.ok()) {
    return s;
  }
  if (tenant_salt_ == nullptr) return api.cache_salt;
  auto tenant = TenantOf(headers, tenant_salt_->header());
  if (!tenant.ok()) return tenant.status();
  return tenant_salt_->Derive(*tenant, api.cache_salt);
}

http::Awaitable<void> RequestPipeline::SetUpstreamBody(RequestContext& ctx, http::Request& req,
                                                       std::string translated,
                                                       const std::optional<std::string>& salt) {
  ctx.upstream_path =
      ctx.kind == ApiKind::kCompletions ? "/v1/completions" : "/v1/chat/completions";
  if (ctx.kind == ApiKind::kMessages) {
    ctx.upstream_body = std::move(translated);
    if (salt) {
      ctx.upstream_body =
          WithCacheSalt(std::move(ctx.upstream_body), *salt, /*body_has_salt=*/false);
    }
  } else if (tenant_salt_ != nullptr) {
    // A body naming cache_salt is re-serialised: on the pool when it is large.
    const bool has_salt = ctx.api.has_cache_salt_key;
    if (has_salt && req.body.size() >= WorkPool::kMinBytes) {
      ctx.upstream_body = co_await pool_.Run(
          [&] { return WithCacheSalt(std::move(req.body), *salt, /*body_has_salt=*/true); });
    } else {
      ctx.upstream_body = WithCacheSalt(std::move(req.body), *salt, has_salt);
    }
  } else {
    ctx.upstream_body = std::move(req.body);
  }
  if (salt) ctx.hash_keys.salt = core::KeyDigest(*salt);
}

http::Awaitable<void> RequestPipeline::Run(RequestContext& ctx, http::Request& req,
                                           http::ResponseWriter& w) {
  const ApiKind kind = ctx.kind;
  ctx.relay = options_.relay;
  if (PassedHere(ctx, req.headers)) {
    ctx.End(Outcome::kClientError, 508);
    co_await SendError(w, kind, 508, "routing loop: the request already passed through this router",
                       ctx.request_id);
    co_return;
  }

  // One parse serves validation and the chat template; a large body is parsed (and
  // translated) on the pool, off the event loop.
  std::optional<simdjson::dom::element> dom;
  // (An if, not a conditional: g++ 12 mis-handles a conditional's temporaries across
  // a suspension point.)
  Parsed body;
  if (req.body.size() >= WorkPool::kMinBytes) {
    body = co_await pool_.Run([&] { return ParseBody(kind, req.body, nullptr); });
  } else {
    body = ParseBody(kind, req.body, &dom);
  }
  // The salt the worker gets: the client's, or its tenant's (doc/router.md "Tenant
  // isolation").
  absl::StatusOr<std::optional<std::string>> salt =
      body.api.ok() ? SaltFor(*body.api, req.headers) : body.api.status();
  ctx.parse_s = SecondsSince(ctx.start_ns);
  if (!salt.ok()) {
    ctx.End(Outcome::kClientError, 400);
    co_await SendError(w, kind, 400, std::string(salt.status().message()), ctx.request_id);
    co_return;
  }
  ctx.api = *std::move(body.api);

  co_await SetUpstreamBody(ctx, req, std::move(body.upstream_body), *salt);
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
  ctx.deadline_ns = clock_.NowNs() + options_.request_timeout_ms * 1'000'000;

  if (options_.admission != nullptr) {  // the admission queue (doc/admission.md)
    co_return co_await options_.admission->Dispatch(ctx, req.headers, w);
  }
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
