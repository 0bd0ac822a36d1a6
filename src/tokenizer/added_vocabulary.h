// AddedVocabulary: the `added_tokens` of tokenizer.json and how they cut the input
// before normalization and pre-tokenization, as Hugging Face's AddedVocabulary does:
// leftmost-longest matching (Aho-Corasick LeftmostLongest semantics), then
// single_word (skip a match touching a word character), lstrip / rstrip (widen the
// match over whitespace). Tokens with normalized=false are matched on the raw text;
// tokens with normalized=true on each normalized piece (their content normalized too).
//
// Thread-safety: immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace infera::tokenizer {

class AddedVocabulary {
 public:
  struct Token {
    std::string content;
    uint32_t id = 0;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool single_word = false;
  };
  // A piece of the input: an added token (token_index >= 0) or text to tokenize.
  struct Split {
    size_t start;
    size_t end;
    int32_t token_index;  // into tokens(), or -1
  };

  // `normalize` gives the normalized form of a normalized token's content (identity
  // when the tokenizer has no normalizer).
  AddedVocabulary(std::vector<Token> tokens,
                  const std::function<std::string(std::string_view)>& normalize);

  const std::vector<Token>& tokens() const { return tokens_; }
  bool has_normalized() const { return normalized_.root_used; }
  std::optional<uint32_t> TokenToId(std::string_view content) const;
  std::optional<std::string> IdToToken(uint32_t id) const;

  // Splits `text` with the raw (normalized=false) or normalized tokens. Appends
  // pieces covering the text in order (empty text gives one empty text piece).
  // REQUIRES: text is valid UTF-8.
  void SplitText(std::string_view text, bool normalized_pass, std::vector<Split>* out) const;

  // Starts q of raw-pass token matches where the encoding provably splits
  // (doc/tokenizer.md "Safe boundaries"), ascending, 0 < q < text.size().
  void SafeBoundaries(std::string_view text, std::vector<size_t>* out) const;
  // For q in SafeBoundaries(text): one past the last byte of `text` that the raw scan
  // reads to decide the matches up to and including the one at q (text.size() + 1 when
  // it reads up to the end, i.e. more text could change them).
  size_t SafeBoundaryReach(std::string_view text, size_t q) const;

 private:
  struct Trie {
    std::array<bool, 256> first{};
    bool root_used = false;
    // (node << 8 | byte) -> child node; node 0 is the root.
    absl::flat_hash_map<uint64_t, uint32_t> edges;
    std::vector<int32_t> terminal{-1};  // node -> token index or -1
    size_t max_len = 0;
    void Add(std::string_view key, int32_t token_index);
    // Longest key starting at text[pos], or nullopt; returns (length, token index).
    std::optional<std::pair<size_t, int32_t>> LongestAt(std::string_view text, size_t pos) const;
  };
  // Raw leftmost-longest matches (before single_word / strip handling).
  void RawMatches(const Trie& trie, std::string_view text,
                  std::vector<std::pair<size_t, int32_t>>* out) const;

  std::vector<Token> tokens_;
  absl::flat_hash_map<std::string, uint32_t> by_content_;
  absl::flat_hash_map<uint32_t, size_t> by_id_;
  Trie raw_;
  Trie normalized_;
  std::vector<std::string> normalized_contents_;  // per token (for normalized tokens)
};

}  // namespace infera::tokenizer
