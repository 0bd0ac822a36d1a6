// PreTokenizer: the `pre_tokenizer` section of tokenizer.json — Split (String or
// Regex pattern; behaviours Removed, Isolated, MergedWithPrevious, MergedWithNext,
// Contiguous; invert), ByteLevel (add_prefix_space, use_regex), Metaspace
// (replacement, prepend_scheme, split), Digits, Punctuation, Whitespace,
// WhitespaceSplit, and Sequence of them.
//
// ByteLevel's byte-to-character mapping is not applied here: a byte-level model keeps
// its vocabulary keyed by raw bytes (BpeModel), so words stay raw bytes. ByteLevel
// must therefore be the last step.
//
// Thread-safety: immutable after FromJson; PreTokenize may run concurrently.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizer/gpt4_splitter.h"
#include "tokenizer/regex.h"

namespace infera::tokenizer {

class PreTokenizer {
 public:
  // `config` is the JSON object (not null).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& config);

  struct Word {
    std::string_view text;
    bool at_origin;  // starts at offset 0 of the original input (Metaspace "first")
  };
  // Splits normalized `text` into words appended to *words; words view into `text`
  // or into strings appended to *storage (which must outlive the words).
  // REQUIRES: text is valid UTF-8.
  void PreTokenize(std::string_view text, bool at_origin, std::vector<Word>* words,
                   std::deque<std::string>* storage) const;

  // True when a ByteLevel step is present (the model then works on raw bytes).
  bool byte_level() const { return byte_level_; }

  // Split delimiter behaviours (Hugging Face SplitDelimiterBehavior).
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

 private:
  enum class Kind {
    kSplitRegex,
    kSplitString,
    kByteLevel,
    kMetaspace,
    kDigits,
    kPunctuation,
    kWhitespace,
    kWhitespaceSplit
  };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Step {
    Kind kind;
    std::unique_ptr<Regex> regex;        // kSplitRegex, kWhitespace, ByteLevel use_regex
    std::unique_ptr<Gpt4Splitter> fast;  // kSplitRegex with a GPT-4-style pattern
    std::string literal;                 // kSplitString pattern, Metaspace replacement
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    bool use_regex = false;         // ByteLevel
    bool individual_digits = false;
    Prepend prepend = Prepend::kAlways;  // Metaspace
    bool split = true;                   // Metaspace
  };
  static absl::Status AddSteps(const nlohmann::json& config, PreTokenizer* p);
  void ApplyStep(const Step& step, const Word& piece, std::vector<Word>* out,
                 std::deque<std::string>* storage,
                 std::vector<std::pair<size_t, size_t>>* scratch) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace infera::tokenizer
