// ResponseTransform: re-shapes a worker's answer for the client's API.
//
// The worker speaks OpenAI chat/completions. A client of the same API gets the bytes
// as they are (no transform: Relay passes them through without a copy); an Anthropic
// /v1/messages client gets them through AnthropicTransform. Another client API is one
// more transform.
//
// Thread-safety: one transform per response.
#pragma once

#include <string>
#include <string_view>

namespace infera::router {

class ResponseTransform {
 public:
  virtual ~ResponseTransform() = default;
  // A whole (non-streamed) answer of `status`: the client's body.
  virtual std::string Whole(int status, std::string body) = 0;
  // Upstream SSE bytes in, client SSE bytes out (possibly empty).
  virtual std::string Chunk(std::string_view upstream_bytes) = 0;
  // The end of the stream: closing events, if any.
  virtual std::string Finish() = 0;
  // An in-band error event after the first byte (status 502 semantics).
  virtual std::string ErrorEvent(std::string_view message) = 0;
};

}  // namespace infera::router
