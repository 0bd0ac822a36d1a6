#include "router/request/anthropic.h"

namespace infera::router {
namespace {

using nlohmann::json;

// obj[key] when obj is an object and the value a string, else `def`: the request was
// type-checked (ParseApiRequest) but upstream responses were not, and a value of
// another type must not throw out of the handler.
std::string Str(const json& obj, const char* key, const char* def) {
  if (!obj.is_object()) return def;
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string(def);
}

// obj[key] when it is a non-negative integer, else `def`.
uint64_t Count(const json& obj, const char* key, uint64_t def) {
  if (!obj.is_object()) return def;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return def;
  return it->is_number_unsigned() || it->get<int64_t>() >= 0 ? it->get<uint64_t>() : def;
}

std::string MapStopReason(const json& finish) {
  if (!finish.is_string()) return "end_turn";
  const std::string& f = finish.get_ref<const std::string&>();
  if (f == "length") return "max_tokens";
  if (f == "tool_calls" || f == "function_call") return "tool_use";
  return "end_turn";
}

std::string TextOf(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const auto& b : content) {
      if (b.is_object() && Str(b, "type", "") == "text" && b.contains("text") &&
          b["text"].is_string()) {
        if (!out.empty()) out += "\n";
        out += b["text"].get<std::string>();
      }
    }
  }
  return out;
}

json ImageBlock(const json& block) {
  const json& src = block.contains("source") ? block["source"] : json::object();
  std::string url;
  if (src.is_object() && Str(src, "type", "") == "url") {
    url = Str(src, "url", "");
  } else if (src.is_object()) {
    url = "data:" + Str(src, "media_type", "image/png") + ";base64," + Str(src, "data", "");
  }
  return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

void AppendEvent(std::string& out, const char* name, const json& data) {
  out += "event: ";
  out += name;
  out += "\ndata: ";
  out += data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out += "\n\n";
}

}  // namespace

json AnthropicToChat(const json& in) {
  json out = json::object();
  out["model"] = Str(in, "model", "");
  json messages = json::array();
  if (in.contains("system")) {
    std::string system = TextOf(in["system"]);
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  }
  for (const auto& m : in["messages"]) {
    std::string role = Str(m, "role", "user");
    const json& content = m.contains("content") ? m["content"] : json("");
    if (content.is_string()) {
      messages.push_back({{"role", role}, {"content", content}});
      continue;
    }
    json parts = json::array();
    json tool_calls = json::array();
    for (const auto& b : content) {
      if (!b.is_object()) continue;
      std::string type = Str(b, "type", "");
      if (type == "text") {
        parts.push_back({{"type", "text"}, {"text", Str(b, "text", "")}});
      } else if (type == "image") {
        parts.push_back(ImageBlock(b));
      } else if (type == "tool_use") {
        tool_calls.push_back({{"id", Str(b, "id", "")},
                              {"type", "function"},
                              {"function",
                               {{"name", Str(b, "name", "")},
                                {"arguments", b.contains("input") ? b["input"].dump() : "{}"}}}});
      } else if (type == "tool_result") {
        json tool_content = b.contains("content") ? b["content"] : json("");
        messages.push_back({{"role", "tool"},
                            {"tool_call_id", Str(b, "tool_use_id", "")},
                            {"content", TextOf(tool_content)}});
      }
    }
    if (parts.empty() && tool_calls.empty()) continue;
    json msg = {{"role", role}};
    // Plain text stays a string (every chat template handles that).
    bool all_text = true;
    for (const auto& p : parts) all_text = all_text && p["type"] == "text";
    if (all_text) {
      std::string text;
      for (const auto& p : parts) text += p["text"].get<std::string>();
      msg["content"] = text;
    } else {
      msg["content"] = parts;
    }
    if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
    messages.push_back(std::move(msg));
  }
  out["messages"] = std::move(messages);
  out["max_tokens"] = in["max_tokens"];
  for (const char* k : {"temperature", "top_p", "top_k"}) {
    if (in.contains(k)) out[k] = in[k];
  }
  if (in.contains("stop_sequences")) out["stop"] = in["stop_sequences"];
  if (in.contains("tools") && in["tools"].is_array()) {
    json tools = json::array();
    for (const auto& t : in["tools"]) {
      if (!t.is_object()) continue;
      tools.push_back(
          {{"type", "function"},
           {"function",
            {{"name", Str(t, "name", "")},
             {"description", Str(t, "description", "")},
             {"parameters", t.contains("input_schema") ? t["input_schema"] : json::object()}}}});
    }
    out["tools"] = std::move(tools);
  }
  bool stream = in.contains("stream") && in["stream"].is_boolean() && in["stream"].get<bool>();
  out["stream"] = stream;
  if (stream) out["stream_options"] = {{"include_usage", true}};
  return out;
}

json ChatResponseToAnthropic(const json& chat, const std::string& model,
                             const std::string& request_id) {
  json content = json::array();
  std::string stop_reason = "end_turn";
  if (chat.contains("choices") && chat["choices"].is_array() && !chat["choices"].empty()) {
    const json& choice = chat["choices"][0];
    if (choice.is_object()) {
      stop_reason = MapStopReason(choice.value("finish_reason", json()));
      const json msg = choice.value("message", json::object());
      if (msg.is_object()) {
        if (msg.contains("content") && msg["content"].is_string()) {
          content.push_back({{"type", "text"}, {"text", msg["content"]}});
        }
        if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
          for (const auto& tc : msg["tool_calls"]) {
            if (!tc.is_object() || !tc.contains("function")) continue;
            json input = json::parse(Str(tc["function"], "arguments", "{}"), nullptr, false);
            if (input.is_discarded()) input = json::object();
            content.push_back({{"type", "tool_use"},
                               {"id", Str(tc, "id", "")},
                               {"name", Str(tc["function"], "name", "")},
                               {"input", input}});
          }
        }
      }
    }
  }
  json usage = {{"input_tokens", 0}, {"output_tokens", 0}};
  if (chat.contains("usage") && chat["usage"].is_object()) {
    usage["input_tokens"] = Count(chat["usage"], "prompt_tokens", 0);
    usage["output_tokens"] = Count(chat["usage"], "completion_tokens", 0);
  }
  return {{"id", "msg_" + request_id}, {"type", "message"},
          {"role", "assistant"},       {"model", model},
          {"content", content},        {"stop_reason", stop_reason},
          {"stop_sequence", nullptr},  {"usage", usage}};
}

const char* AnthropicErrorType(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string AnthropicErrorBody(int status, std::string_view message) {
  json j = {{"type", "error"},
            {"error", {{"type", AnthropicErrorType(status)}, {"message", message}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

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
