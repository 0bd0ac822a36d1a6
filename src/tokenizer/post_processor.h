// PostProcessor: the `post_processor` section of tokenizer.json for single sequences
// with add_special_tokens — TemplateProcessing ("single"), BertProcessing and
// RobertaProcessing ([cls] A [sep]), ByteLevel (adds nothing), Sequence.
//
// Thread-safety: immutable after FromJson.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace infera::tokenizer {

class PostProcessor {
 public:
  static absl::StatusOr<std::unique_ptr<PostProcessor>> FromJson(const nlohmann::json& config);

  // The final ids for one sequence `ids` (moved in).
  std::vector<uint32_t> Process(std::vector<uint32_t> ids) const;

 private:
  absl::Status AddSteps(const nlohmann::json& config);
  // One step: ids before and after the sequence, in order.
  struct Step {
    std::vector<uint32_t> before;
    std::vector<uint32_t> after;
  };
  std::vector<Step> steps_;
};

}  // namespace infera::tokenizer
