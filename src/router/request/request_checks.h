// The shape checks of a request body that ParseApiRequest (api_request.h) runs before
// any stage reads it: `messages` (every API with messages) and the Anthropic fields
// AnthropicToChat reads, each of the type the API names, so the translation never
// meets a value of the wrong type.
//
// Untrusted input: every failure is InvalidArgument with a message for the client
// naming the field (`messages[2].content[0].text must be a string`).
// Thread-safety: pure functions.
#pragma once

#include "absl/status/status.h"
#include "simdjson.h"

namespace infera::router {

// `messages`: a non-empty array of objects, each with a string role and a content
// that is a string, an array of blocks or null (`anthropic`: required).
absl::Status CheckMessages(const simdjson::dom::object& body, bool anthropic);

// The content blocks of messages and system, and tools, of an Anthropic body.
// REQUIRES: CheckMessages(body, true).ok().
absl::Status CheckAnthropicBody(const simdjson::dom::object& body);

}  // namespace infera::router
