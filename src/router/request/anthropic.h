// Anthropic Messages API <-> OpenAI chat completions (POST /v1/messages).
//
// The router serves /v1/messages by translating the request to a chat completion
// for the worker and translating the answer back, streaming included:
//   request:  system (string or text blocks) -> a leading system message; content
//             blocks text -> text, image (base64 or url source) -> image_url,
//             tool_use -> assistant tool_calls, tool_result -> a tool message;
//             tools -> function tools; max_tokens, temperature, top_p, top_k,
//             stop_sequences -> stop, stream (+ stream_options.include_usage).
//   response: chat.completion -> {"type":"message", content:[text, tool_use...],
//             stop_reason (stop->end_turn, length->max_tokens,
//             tool_calls->tool_use), usage{input_tokens, output_tokens}}.
//   stream:   chat.completion.chunk SSE -> message_start, content_block_start,
//             content_block_delta (text_delta), content_block_stop,
//             message_delta (stop_reason, usage), message_stop.
//
// Thread-safety: functions are pure; a StreamTranslator serves one stream.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "router/request/sse_parser.h"

namespace infera::router {

// REQUIRES: `messages_body` passed ParseApiRequest(kMessages).
nlohmann::json AnthropicToChat(const nlohmann::json& messages_body);

// Translates a chat.completion JSON body; `request_id` names the message.
nlohmann::json ChatResponseToAnthropic(const nlohmann::json& chat, const std::string& model,
                                       const std::string& request_id);

// {"type":"error","error":{"type":<by status>,"message":...}}
std::string AnthropicErrorBody(int status, std::string_view message);
const char* AnthropicErrorType(int status);

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
