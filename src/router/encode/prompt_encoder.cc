#include "router/encode/prompt_encoder.h"

#include <algorithm>
#include <exception>

#include "spdlog/spdlog.h"
#include "template/chat_template.h"
#include "tokenizer/prefix_caching_encoder.h"
#include "tokenizer/tokenizer.h"

namespace infera::router {

PromptEncoder::PromptEncoder(PromptEncoderOptions options, RouterMetrics& metrics, WorkPool& pool)
    : options_(options), metrics_(metrics), pool_(pool) {}

PromptEncoder::~PromptEncoder() = default;

absl::Status PromptEncoder::Load(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  auto tok = tokenizer::Tokenizer::Load(dir);
  if (!tok.ok()) return tok.status();
  tokenizer_ = std::move(*tok);
  encoder_ = std::make_unique<tokenizer::PrefixCachingEncoder>(*tokenizer_, 1024);
  auto tmpl = chat::ChatTemplate::Load(dir);
  if (tmpl.ok()) {
    template_ = std::make_unique<chat::ChatTemplate>(std::move(*tmpl));
  } else {
    spdlog::warn("no chat template in {}: {}; chat requests use the estimate", dir,
                 tmpl.status().ToString());
  }
  return absl::OkStatus();
}

PromptEncoder::Tokens PromptEncoder::EncodeText(ApiKind kind, const std::string& prompt_text,
                                                const std::string& body,
                                                const std::optional<simdjson::dom::element>& dom,
                                                const std::string& request_id) const {
  if (kind == ApiKind::kCompletions) return tokenizer_->Encode(prompt_text, true);
  // Chat renders from the parse of the body the worker receives; messages from its
  // translation to chat.
  auto rendered =
      kind == ApiKind::kChat && dom ? template_->RenderDom(*dom) : template_->RenderJson(body);
  if (!rendered.ok()) {
    spdlog::debug("request {}: render failed ({}); using the estimate", request_id,
                  rendered.status().ToString());
    metrics_.CountPromptEstimated("render_failed");
    return std::nullopt;
  }
  if (options_.max_tokenize_bytes > 0 && rendered->size() > options_.max_tokenize_bytes) {
    metrics_.CountPromptEstimated("over_max_tokenize_bytes");
    return std::nullopt;
  }
  return encoder_->Encode(*rendered);
}

std::optional<ProbeRendering> PromptEncoder::RenderProbe() const {
  if (!encoder_ || !template_) return std::nullopt;
  absl::StatusOr<std::string> rendered = template_->RenderJson(ProbeChatBody());
  if (!rendered.ok()) {
    spdlog::warn("render parity: the chat template fails on the probe: {}",
                 rendered.status().ToString());
    return std::nullopt;
  }
  std::vector<core::TokenId> ids = encoder_->Encode(*rendered);
  return ProbeRendering{*std::move(rendered), std::move(ids)};
}

http::Awaitable<void> PromptEncoder::Encode(
    RequestContext& ctx, const std::optional<simdjson::dom::element>& dom) const {
  ctx.tokens = std::move(ctx.api.prompt_tokens);
  if (ctx.tokens || !encoder_) co_return;
  const bool completions = ctx.kind == ApiKind::kCompletions;
  if (completions ? ctx.api.prompt_text.empty() : !template_ || !ctx.api.image_keys.empty()) {
    co_return;
  }
  // What is rendered or tokenized: the prompt, or the body the chat renders from.
  const size_t bytes = completions ? ctx.api.prompt_text.size() : ctx.upstream_body.size();
  if (options_.max_tokenize_bytes > 0 && bytes > options_.max_tokenize_bytes) {
    metrics_.CountPromptEstimated("over_max_tokenize_bytes");
    co_return;
  }
  if (bytes < kPoolMinBytes) {
    ctx.tokens = EncodeText(ctx.kind, ctx.api.prompt_text, ctx.upstream_body, dom, ctx.request_id);
    co_return;
  }
  if (pool_.queued() >= pool_.threads() * kMaxQueuedPerThread) {
    metrics_.CountPromptEstimated("tokenizer_busy");
    co_return;
  }
  // On the pool: the parse in `dom` lives in this loop's parser, so the body is
  // parsed again there (RenderJson); this coroutine resumes on its own loop.
  metrics_.TokenizeJobs(+1);
  const std::optional<simdjson::dom::element> no_dom;
  // Not an RAII guard: a frame destroyed unresumed at shutdown must not touch us.
  std::exception_ptr error;
  try {
    ctx.tokens = co_await pool_.Run([&] {
      return EncodeText(ctx.kind, ctx.api.prompt_text, ctx.upstream_body, no_dom, ctx.request_id);
    });
  } catch (...) {
    error = std::current_exception();
  }
  metrics_.TokenizeJobs(-1);
  if (error) std::rethrow_exception(error);
}

}  // namespace infera::router
