// Normalizer: the `normalizer` section of tokenizer.json — NFC, NFD, NFKC, NFKD,
// Lowercase, Replace (String or Regex pattern), Prepend, Strip, Sequence of them.
//
// Thread-safety: immutable after FromJson; Normalize may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizer/regex.h"

namespace infera::tokenizer {

class Normalizer {
 public:
  // `config` is the JSON object (not null). InvalidArgument for unknown types.
  static absl::StatusOr<std::unique_ptr<Normalizer>> FromJson(const nlohmann::json& config);

  // Normalized form of `text` into *out (cleared first).
  // REQUIRES: text is valid UTF-8.
  void Normalize(std::string_view text, std::string* out) const;

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend, kStrip };
  struct Step {
    Kind kind;
    std::string pattern;           // Replace (String pattern)
    std::unique_ptr<Regex> regex;  // Replace (Regex pattern)
    std::string content;           // Replace content, Prepend text
    bool strip_left = false, strip_right = false;
  };
  static absl::Status AddSteps(const nlohmann::json& config, Normalizer* n);
  static void Apply(const Step& step, std::string_view in, std::string* out);

  std::vector<Step> steps_;
};

}  // namespace infera::tokenizer
