// The mock engine's POST /tokenize, in the shape of the engine it plays
// (doc/render-parity.md "Shapes"):
//
//   vLLM (--engine vllm, vllm-array): {"prompt": "...", "add_special_tokens"?: bool
//     (default true)} or {"messages": [...], "add_generation_prompt"?: bool (default
//     true), "add_special_tokens"?: ignored: a rendered chat gets none}
//   SGLang (--engine sglang): {"prompt": "...", "add_special_tokens"?: bool (default
//     true)} only; a body without a string "prompt" is a 400 (its /tokenize takes text).
//   Both: "model" is accepted and ignored; the answer is
//     {"tokens": [...], "count": N, "max_model_len": L}.
// The ids are PromptTokenizer's, so --render-differently shows here as in generation.
//
// Thread-safety: pure function of its arguments.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "prompt_tokenizer.h"

namespace infera::mock {

enum class TokenizeShape { kVllm, kSglang };

// The answer body, or InvalidArgument (a 400) with the message to send.
absl::StatusOr<nlohmann::json> TokenizeAnswer(const nlohmann::json& body, TokenizeShape shape,
                                              const PromptTokenizer& tokenizer,
                                              size_t max_model_len);

}  // namespace infera::mock
