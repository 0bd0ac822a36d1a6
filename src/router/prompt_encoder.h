// PromptEncoder: the token ids the pick scores a request with.
//
// In order: the client's integer-array prompt; else, with --router-tokenizer-path,
// a completions string prompt tokenized with special tokens (as vLLM does), or the
// chat template rendered from the exact body the worker receives (object key order
// reaches the prompt through tojson) and tokenized by the prefix-caching encoder;
// else nothing, and the bytes/4 estimate (ApiRequest::estimated_tokens) sizes the
// request. Multimodal requests are not tokenized. A render failure falls back to the
// estimate (logged at debug level).
//
// Next (render-parity probes, several template variants): one rendering per variant
// lands here, the pick chooses among them.
//
// Thread-safety: Load() once before serving; Encode() from any thread (the
// prefix-caching encoder locks internally).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "router/request_context.h"
#include "simdjson.h"

namespace infera::tokenizer {
class Tokenizer;
class PrefixCachingEncoder;
}  // namespace infera::tokenizer
namespace infera::chat {
class ChatTemplate;
}

namespace infera::router {

class PromptEncoder {
 public:
  PromptEncoder();
  ~PromptEncoder();
  PromptEncoder(const PromptEncoder&) = delete;
  PromptEncoder& operator=(const PromptEncoder&) = delete;

  // Loads tokenizer.json and the chat template of `dir` ("" = estimate only). A
  // missing template is a warning: chat requests then use the estimate.
  absl::Status Load(const std::string& dir);

  // Sets ctx.tokens (moving the client's ids out of ctx.api). `dom`: the request's
  // simdjson parse when valid (chat renders from it; it must still be live, i.e. no
  // suspension since ParseApiRequest on this thread).
  void Encode(RequestContext& ctx, const std::optional<simdjson::dom::element>& dom) const;

 private:
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::PrefixCachingEncoder> encoder_;
  std::unique_ptr<chat::ChatTemplate> template_;
};

}  // namespace infera::router
