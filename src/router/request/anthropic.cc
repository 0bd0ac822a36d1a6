#include "router/request/anthropic.h"

#include "router/request/anthropic_json.h"

namespace infera::router {
namespace {

using anthropic_json::Count;
using anthropic_json::MapStopReason;
using anthropic_json::Str;
using nlohmann::json;

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

}  // namespace infera::router
