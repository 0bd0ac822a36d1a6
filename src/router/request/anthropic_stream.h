// AnthropicStreamTranslator: a chat completion's SSE stream as an Anthropic Messages
// stream (POST /v1/messages with "stream": true; anthropic.h has the request and the
// whole-answer translations).
//
//   chat.completion.chunk SSE -> message_start, content_block_start,
//   content_block_delta (text_delta, or input_json_delta for tool calls),
//   content_block_stop, message_delta (stop_reason, usage), message_stop;
//   an upstream chunk with an `error` -> an `error` event.
//
// Thread-safety: one translator serves one stream.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "router/request/sse_parser.h"

namespace infera::router {

class AnthropicStreamTranslator {
 public:
  // `input_tokens`: the prompt's size as the router counted it (its tokens, or the
  // estimate), reported by message_start unless the engine's first chunk has usage;
  // message_delta reports the engine's usage when it sent one.
  AnthropicStreamTranslator(std::string model, std::string request_id, int64_t input_tokens = 0)
      : model_(std::move(model)), request_id_(std::move(request_id)), input_tokens_(input_tokens) {}
  // Upstream SSE bytes in, Anthropic SSE bytes out (possibly empty).
  std::string Feed(std::string_view upstream_bytes);
  // Closes any open block and emits message_delta + message_stop if not yet sent.
  std::string Finish();
  bool finished() const { return stopped_; }

 private:
  void Start(std::string& out);
  void HandleChunk(const nlohmann::json& chunk, std::string& out);
  void CloseBlock(std::string& out);

  std::string model_;
  std::string request_id_;
  SseParser parser_;
  bool started_ = false;
  bool block_open_ = false;
  bool block_is_tool_ = false;
  int block_index_ = -1;
  bool stopped_ = false;
  std::string stop_reason_ = "end_turn";
  int64_t input_tokens_ = 0;
  int64_t output_tokens_ = 0;
};

}  // namespace infera::router
