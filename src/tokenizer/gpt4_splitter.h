// Gpt4Splitter: a hand-written matcher for the word-splitting regex family used by
// Qwen 2/3, Llama 3, DeepSeek V3 and GPT-4-style tokenizers
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// (K = 1 for Qwen's `\p{N}`, 3 for Llama 3's `\p{N}{1,3}`). It gives exactly the
// matches of Regex::FindAll on the same pattern (same character classes: Oniguruma
// \s, \p{L} and \p{N} as Regex rewrites them), several times faster than PCRE2's JIT.
// The case analysis is in doc/tokenizer.md ("Fast path for GPT-4-style patterns").
//
// Thread-safety: immutable; FindAll may run concurrently.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace infera::tokenizer {

class Gpt4Splitter {
 public:
  // A splitter if `pattern` is exactly one of the supported patterns, else nullptr.
  static std::unique_ptr<Gpt4Splitter> ForPattern(std::string_view pattern);

  // Same contract as Regex::FindAll. REQUIRES: text is valid UTF-8.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

 private:
  explicit Gpt4Splitter(int max_digits) : max_digits_(max_digits) {}
  int max_digits_;
};

}  // namespace infera::tokenizer
