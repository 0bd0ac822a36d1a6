// AnthropicTransform: the response side of /v1/messages (anthropic.h does the
// translation): chat.completion -> message, chat.completion.chunk SSE -> Anthropic
// events, an upstream error -> Anthropic's error shape.
//
// Thread-safety: one per response.
#pragma once

#include <cstdint>
#include <string>

#include "router/request/anthropic_stream.h"
#include "router/request/response_transform.h"

namespace infera::router {

class AnthropicTransform final : public ResponseTransform {
 public:
  // `input_tokens`: the router's count of the prompt (message_start's usage).
  AnthropicTransform(std::string model, std::string request_id, int64_t input_tokens)
      : model_(model),
        request_id_(request_id),
        stream_(std::move(model), std::move(request_id), input_tokens) {}

  std::string Whole(int status, std::string body) override;
  std::string Chunk(std::string_view upstream_bytes) override {
    return stream_.Feed(upstream_bytes);
  }
  std::string Finish() override { return stream_.Finish(); }
  std::string ErrorEvent(std::string_view message) override;

 private:
  std::string model_;
  std::string request_id_;
  AnthropicStreamTranslator stream_;
};

}  // namespace infera::router
