// Tokenizer: a Hugging Face `tokenizer.json` tokenizer, id-for-id equal to the
// `tokenizers` library (BPE byte-level and SentencePiece-style BPE with byte fallback,
// normalizers, pre-tokenizers, added/special tokens, template post-processor).
//
// Usage:
//   absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load("/models/qwen3");
//   if (!t.ok()) return t.status();
//   std::vector<uint32_t> ids = (*t)->Encode(rendered_prompt, /*add_special_tokens=*/false);
//
// Contract: Encode() gives exactly the ids of Hugging Face `tokenizer.encode(text,
// add_special_tokens)`.input_ids for the same tokenizer.json. Text that is not valid
// UTF-8 is first made valid the way a JS/Python string would carry it: each invalid
// byte becomes U+FFFD (doc/tokenizer.md).
//
// Thread-safety: a loaded Tokenizer is immutable except for an internal word -> ids
// cache that is internally synchronised; every const method may be called from any
// number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace infera::tokenizer {

class TokenizerImpl;

class Tokenizer {
 public:
  // Loads `path`: a directory holding tokenizer.json (and optionally
  // tokenizer_config.json), or the tokenizer.json file itself. Unsupported or
  // malformed files give InvalidArgument with the reason; a missing file NotFound.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);

  // Parses the text of a tokenizer.json (no file access).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Ids of `text`. With add_special_tokens, the post-processor adds what it asks for
  // (e.g. <|begin_of_text|> for Llama 3, <bos> for Gemma).
  std::vector<uint32_t> Encode(std::string_view text, bool add_special_tokens) const;

  // Appends the ids of `text` without special tokens to *out (no post-processor).
  void EncodeAppend(std::string_view text, std::vector<uint32_t>* out) const;

  // Positions in `text` where Encode(text, false) may be split:
  // Encode(text[0:q], false) ++ Encode(text[q:], false) == Encode(text, false) for
  // every returned q (ascending, each 0 < q < text.size()). These are the starts of
  // added-token matches that do not depend on their surroundings (doc/tokenizer.md,
  // "Safe boundaries"). Used by PrefixCachingEncoder.
  std::vector<size_t> SafeBoundaries(std::string_view text) const;
  // What decides a safe boundary. REQUIRES: q is in SafeBoundaries(text). Returns r
  // such that every valid UTF-8 text b with b[0:r] == text[0:r] (b at least r bytes
  // long) has q in SafeBoundaries(b), with the same safe boundaries below q
  // (text.size() + 1 when no other text qualifies). doc/tokenizer.md, "Safe boundaries".
  size_t SafeBoundaryReach(std::string_view text, size_t q) const;

  // Vocabulary lookups (including added tokens).
  std::optional<uint32_t> TokenToId(std::string_view token) const;
  std::optional<std::string> IdToToken(uint32_t id) const;
  size_t vocab_size() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

}  // namespace infera::tokenizer
