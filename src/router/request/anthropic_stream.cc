#include "router/request/anthropic_stream.h"

#include "router/request/anthropic_json.h"

namespace infera::router {
namespace {

using nlohmann::json;

// One SSE event `name` with `data` (invalid UTF-8 replaced, never thrown on).
void AppendEvent(std::string& out, const char* name, const json& data) {
  out += "event: ";
  out += name;
  out += "\ndata: ";
  out += data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out += "\n\n";
}

using anthropic_json::Count;
using anthropic_json::MapStopReason;
using anthropic_json::Str;

}  // namespace

void AnthropicStreamTranslator::Start(std::string& out) {
  if (started_) return;
  started_ = true;
  AppendEvent(out, "message_start",
              {{"type", "message_start"},
               {"message",
                {{"id", "msg_" + request_id_},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", model_},
                 {"content", json::array()},
                 {"stop_reason", nullptr},
                 {"stop_sequence", nullptr},
                 {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}}}});
}

void AnthropicStreamTranslator::CloseBlock(std::string& out) {
  if (!block_open_) return;
  AppendEvent(out, "content_block_stop", {{"type", "content_block_stop"}, {"index", block_index_}});
  block_open_ = false;
}

void AnthropicStreamTranslator::HandleChunk(const json& chunk, std::string& out) {
  if (!chunk.is_object()) return;
  if (chunk.contains("usage") && chunk["usage"].is_object()) {
    input_tokens_ = Count(chunk["usage"], "prompt_tokens", input_tokens_);
    output_tokens_ = Count(chunk["usage"], "completion_tokens", output_tokens_);
  }
  Start(out);
  if (!chunk.contains("choices") || !chunk["choices"].is_array()) return;
  for (const auto& choice : chunk["choices"]) {
    if (!choice.is_object()) continue;
    const json delta = choice.value("delta", json::object());
    if (delta.is_object() && delta.contains("content") && delta["content"].is_string() &&
        !delta["content"].get_ref<const std::string&>().empty()) {
      if (block_open_ && block_is_tool_) CloseBlock(out);
      if (!block_open_) {
        ++block_index_;
        block_open_ = true;
        block_is_tool_ = false;
        AppendEvent(out, "content_block_start",
                    {{"type", "content_block_start"},
                     {"index", block_index_},
                     {"content_block", {{"type", "text"}, {"text", ""}}}});
      }
      AppendEvent(out, "content_block_delta",
                  {{"type", "content_block_delta"},
                   {"index", block_index_},
                   {"delta", {{"type", "text_delta"}, {"text", delta["content"]}}}});
    }
    if (delta.is_object() && delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
      for (const auto& tc : delta["tool_calls"]) {
        if (!tc.is_object()) continue;
        const json fn = tc.value("function", json::object());
        if (tc.contains("id") && tc["id"].is_string()) {
          CloseBlock(out);
          ++block_index_;
          block_open_ = true;
          block_is_tool_ = true;
          AppendEvent(out, "content_block_start",
                      {{"type", "content_block_start"},
                       {"index", block_index_},
                       {"content_block",
                        {{"type", "tool_use"},
                         {"id", tc["id"]},
                         {"name", Str(fn, "name", "")},
                         {"input", json::object()}}}});
        }
        if (block_open_ && block_is_tool_ && fn.is_object() && fn.contains("arguments") &&
            fn["arguments"].is_string()) {
          AppendEvent(
              out, "content_block_delta",
              {{"type", "content_block_delta"},
               {"index", block_index_},
               {"delta", {{"type", "input_json_delta"}, {"partial_json", fn["arguments"]}}}});
        }
      }
    }
    if (choice.contains("finish_reason") && !choice["finish_reason"].is_null()) {
      stop_reason_ = MapStopReason(choice["finish_reason"]);
    }
  }
}

std::string AnthropicStreamTranslator::Feed(std::string_view upstream_bytes) {
  std::string out;
  for (const std::string& data : parser_.Feed(upstream_bytes)) {
    if (data == "[DONE]") continue;
    json chunk = json::parse(data, nullptr, false);
    if (chunk.is_discarded()) continue;
    if (chunk.contains("error")) {
      Start(out);
      json err = {{"type", "error"},
                  {"error",
                   {{"type", "api_error"},
                    {"message", chunk["error"].is_object()
                                    ? Str(chunk["error"], "message", "upstream error")
                                    : chunk["error"].dump()}}}};
      AppendEvent(out, "error", err);
      continue;
    }
    HandleChunk(chunk, out);
  }
  return out;
}

std::string AnthropicStreamTranslator::Finish() {
  std::string out;
  if (stopped_) return out;
  Start(out);
  CloseBlock(out);
  AppendEvent(out, "message_delta",
              {{"type", "message_delta"},
               {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", nullptr}}},
               {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", output_tokens_}}}});
  AppendEvent(out, "message_stop", {{"type", "message_stop"}});
  stopped_ = true;
  return out;
}

}  // namespace infera::router