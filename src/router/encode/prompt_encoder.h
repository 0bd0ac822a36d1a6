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
// Hostile sizes (doc/router.md "Limits and hostile input"): a prompt longer than
// max_tokenize_bytes (the completions text, or the chat body and its rendering) is
// not tokenized: the estimate sizes it (one 15 MB prompt of random letters cost
// 13.6 CPU-s). Prompts of kPoolMinBytes and more are rendered and tokenized on the
// router's WorkPool, not on the I/O loop, so /health and other streams of that loop
// never wait behind them; when the pool already has kMaxQueuedPerThread jobs per
// thread waiting, the estimate is used instead of queueing.
//
// RenderProbe() renders the render-parity probe the same way (doc/render-parity.md).
// Next (several template variants): one rendering per variant lands here, the pick
// chooses among them.
//
// Thread-safety: Load() once before serving; Encode() from any loop (the
// prefix-caching encoder locks internally; the pool's jobs only read the tokenizer
// and the template).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "http/asio.h"
#include "router/encode/render_parity.h"
#include "router/request/request_context.h"
#include "router/metrics/router_metrics.h"
#include "router/work_pool.h"
#include "simdjson.h"

namespace infera::tokenizer {
class Tokenizer;
class PrefixCachingEncoder;
}  // namespace infera::tokenizer
namespace infera::chat {
class ChatTemplate;
}

namespace infera::router {

struct PromptEncoderOptions {
  uint64_t max_tokenize_bytes = 1ull << 20;  // --max-tokenize-bytes (0: no limit)
};

class PromptEncoder {
 public:
  // Prompts of at least this many bytes are encoded on the pool.
  static constexpr size_t kPoolMinBytes = WorkPool::kMinBytes;
  static constexpr int kMaxQueuedPerThread = 16;

  // REQUIRES: `metrics` and `pool` outlive the encoder; the pool is joined before
  // the encoder is destroyed (its jobs read the tokenizer).
  PromptEncoder(PromptEncoderOptions options, RouterMetrics& metrics, WorkPool& pool);
  ~PromptEncoder();
  PromptEncoder(const PromptEncoder&) = delete;
  PromptEncoder& operator=(const PromptEncoder&) = delete;

  // Loads tokenizer.json and the chat template of `dir` ("" = estimate only). A
  // missing template is a warning: chat requests then use the
  // estimate.
  absl::Status Load(const std::string& dir);

  // Sets ctx.tokens (moving the client's ids out of ctx.api). `dom`: the request's
  // simdjson parse when valid (a small chat renders from it before any suspension:
  // it lives in this thread's parser). Suspends only for a prompt sent to the pool.
  http::Awaitable<void> Encode(RequestContext& ctx,
                               const std::optional<simdjson::dom::element>& dom) const;

  // The probe conversation (ProbeChatBody) rendered and tokenized as a chat request
  // is; nullopt without a tokenizer and chat template, or when the template fails on it.
  std::optional<ProbeRendering> RenderProbe() const;

 private:
  using Tokens = std::optional<std::vector<core::TokenId>>;
  // Render (chat, messages) + tokenize, on whatever thread calls it.
  Tokens EncodeText(ApiKind kind, const std::string& prompt_text, const std::string& body,
                    const std::optional<simdjson::dom::element>& dom,
                    const std::string& request_id) const;

  const PromptEncoderOptions options_;
  RouterMetrics& metrics_;
  WorkPool& pool_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::PrefixCachingEncoder> encoder_;
  std::unique_ptr<chat::ChatTemplate> template_;
};

}  // namespace infera::router
