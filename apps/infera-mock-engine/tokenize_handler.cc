#include "tokenize_handler.h"

#include <string>
#include <vector>

namespace infera::mock {

using nlohmann::json;

absl::StatusOr<json> TokenizeAnswer(const json& body, TokenizeShape shape,
                                    const PromptTokenizer& tokenizer, size_t max_model_len) {
  absl::StatusOr<std::vector<core::TokenId>> ids = absl::InvalidArgumentError(
      shape == TokenizeShape::kSglang ? "give 'prompt' (a string)"
                                      : "give 'prompt' (a string) or 'messages' (an array)");
  const auto special = body.find("add_special_tokens");
  if (special != body.end() && !special->is_boolean()) {
    return absl::InvalidArgumentError("'add_special_tokens' must be a boolean");
  }
  const bool add_special = special == body.end() || special->get<bool>();
  if (shape == TokenizeShape::kVllm && body.contains("messages")) {
    ids = tokenizer.EncodeChat(body);
  } else if (const auto prompt = body.find("prompt"); prompt != body.end() && prompt->is_string()) {
    ids = tokenizer.EncodeText(prompt->get<std::string>(), add_special);
  }
  if (!ids.ok()) return ids.status();
  json out = json::object();
  out["tokens"] = *ids;
  out["count"] = ids->size();
  out["max_model_len"] = max_model_len;
  return out;
}

}  // namespace infera::mock
