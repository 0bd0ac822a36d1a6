// What routing reads from a prompt without tokenizing it (api_request.h): the token
// estimate (string bytes / 4, skipping inline binary payloads: `data:` URLs and the
// values of `data` keys) and the image keys (architecture §8) of the content blocks
// in OpenAI or Anthropic shape and of a top-level `images` list.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "simdjson.h"

namespace infera::router {

// Bytes of prompt text under `v` / 4, at least 1.
size_t EstimateTokens(const simdjson::dom::element& v);

// core::ImageKey of every image, document, file, audio or video reference in the
// body's messages (tool_result blocks' nested content included) and `images`.
std::vector<uint64_t> CollectImageKeys(const simdjson::dom::element& body);

}  // namespace infera::router
