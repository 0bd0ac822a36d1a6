#include "router/prompt_encoder.h"

#include "spdlog/spdlog.h"
#include "template/chat_template.h"
#include "tokenizer/prefix_caching_encoder.h"
#include "tokenizer/tokenizer.h"

namespace infera::router {

PromptEncoder::PromptEncoder() = default;
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

void PromptEncoder::Encode(RequestContext& ctx,
                           const std::optional<simdjson::dom::element>& dom) const {
  ctx.tokens = std::move(ctx.api.prompt_tokens);
  if (ctx.tokens || !encoder_) return;
  if (ctx.kind == ApiKind::kCompletions) {
    if (!ctx.api.prompt_text.empty()) ctx.tokens = tokenizer_->Encode(ctx.api.prompt_text, true);
    return;
  }
  if (!template_ || !ctx.api.image_keys.empty()) return;
  // Chat renders from the parse of the body the worker receives; messages from its
  // translation to chat.
  auto rendered = ctx.kind == ApiKind::kChat && dom ? template_->RenderDom(*dom)
                                                    : template_->RenderJson(ctx.upstream_body);
  if (rendered.ok()) {
    ctx.tokens = encoder_->Encode(*rendered);
  } else {
    spdlog::debug("request {}: render failed ({}); using the estimate", ctx.request_id,
                  rendered.status().ToString());
  }
}

}  // namespace infera::router
