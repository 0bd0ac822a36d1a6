// PromptTokenizer: turns OpenAI request bodies into token ids for the mock engine.
//
// With --tokenizer DIR: chat messages are rendered with the model's chat template
// (infera::chat::ChatTemplate, add_generation_prompt defaulting to true) and text
// is encoded with infera::tokenizer::Tokenizer (no special tokens added for
// rendered chats, as vLLM does). Without one: a byte-level fallback (token = byte
// value + 1; chats rendered as "<|role|>\ncontent\n" per message) so the engine
// still works on text, deterministically.
//
// render_differently (--render-differently, doc/render-parity.md): every prompt
// rendered or tokenized from text gets one more token at its end (the id of "\n"),
// as an engine whose template ends the generation prompt differently; token-id
// prompts are left alone.
//
// Thread-safety: immutable after Load; all methods may run concurrently.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/types.h"

namespace infera::mock {

class PromptTokenizer {
 public:
  // dir empty: the byte-level fallback.
  static absl::StatusOr<std::unique_ptr<PromptTokenizer>> Load(const std::string& dir,
                                                               bool render_differently = false);
  ~PromptTokenizer();

  std::vector<core::TokenId> EncodeText(const std::string& text, bool add_special_tokens) const;
  // Renders `body` ({"messages": [...], "tools"?, "add_generation_prompt"?, ...}).
  absl::StatusOr<std::vector<core::TokenId>> EncodeChat(const nlohmann::json& body) const;
  // Text for generated token ids (the mock's output is synthetic).
  static std::string TokenText(core::TokenId id);
  bool has_tokenizer() const;

 private:
  struct Impl;
  explicit PromptTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace infera::mock
