// Regex: a compiled PCRE2 pattern (8-bit, UTF + UCP, JIT when available) used for
// the Split pre-tokenizer and the Replace normalizer, in place of the Oniguruma
// regexes Hugging Face tokenizers uses (doc/tokenizer.md lists the differences).
//
// Thread-safety: immutable after Compile; FindAll may run concurrently (per-thread
// match data and JIT stack).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace infera::tokenizer {

class Regex {
 public:
  // Compiles an Oniguruma-style pattern (\\s and \\S are given Oniguruma's meaning).
  // InvalidArgument on a bad pattern.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [start, end) byte ranges of all non-overlapping matches, left to
  // right (an empty match advances one character). If the matcher fails (resource
  // limits on pathological input), matching stops there: the rest is unmatched.
  // REQUIRES: text is valid UTF-8.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

 private:
  Regex() = default;
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace infera::tokenizer
