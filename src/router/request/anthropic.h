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
//   stream:   AnthropicStreamTranslator (anthropic_stream.h).
//
// Thread-safety: functions are pure.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace infera::router {

// REQUIRES: `messages_body` passed ParseApiRequest(kMessages).
nlohmann::json AnthropicToChat(const nlohmann::json& messages_body);

// Translates a chat.completion JSON body; `request_id` names the message.
nlohmann::json ChatResponseToAnthropic(const nlohmann::json& chat, const std::string& model,
                                       const std::string& request_id);

// {"type":"error","error":{"type":<by status>,"message":...}}
std::string AnthropicErrorBody(int status, std::string_view message);
const char* AnthropicErrorType(int status);

}  // namespace infera::router
