// Error bodies in each API's own shape, and the two ways the router answers with JSON.
//
//   OpenAI:    {"error":{"message":..., "type":..., "code":...}}
//   Anthropic: {"type":"error","error":{"type":..., "message":...}}  (anthropic.h)
// Types by status are in doc/router.md "Failure handling".
//
// Thread-safety: pure functions; SendJson/SendError run on the writer's loop.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "http/server.h"
#include "router/request/api_request.h"

namespace infera::router {

// `code` null: the status number.
std::string OpenAiErrorBody(int status, std::string_view message, const char* code = nullptr);
// The error body for a client of `kind` (Anthropic for kMessages, else OpenAI).
std::string ErrorBodyFor(ApiKind kind, int status, std::string_view message,
                         const char* code = nullptr);
// An upstream's error message, for wrapping in another API's shape: error.message,
// error (a string), message, or the first 500 bytes of the body.
std::string UpstreamMessage(const std::string& body);
// "<who> answered <status>: <UpstreamMessage>" (no message when the body could not be
// read): a worker's 5xx for the client's error, naming no worker or address.
std::string UpstreamStatusMessage(std::string_view who, int status,
                                  const absl::StatusOr<std::string>& body);

// A JSON answer with X-Infera-Request-Id (when non-empty).
http::Awaitable<void> SendJson(http::ResponseWriter& w, int status, const std::string& body,
                               const std::string& request_id);
http::Awaitable<void> SendError(http::ResponseWriter& w, ApiKind kind, int status,
                                std::string message, const std::string& request_id,
                                const char* code = nullptr);

}  // namespace infera::router
