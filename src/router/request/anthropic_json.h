// JSON reading shared by the Anthropic translations (anthropic.h, anthropic_stream.h).
// The request was type-checked (ParseApiRequest) but upstream responses were not: a
// value of another type yields the default, never an exception out of the handler.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace infera::router::anthropic_json {

// obj[key] when obj is an object and the value a string, else `def`.
inline std::string Str(const nlohmann::json& obj, const char* key, const char* def) {
  if (!obj.is_object()) return def;
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string(def);
}

// obj[key] when it is a non-negative integer, else `def`.
inline uint64_t Count(const nlohmann::json& obj, const char* key, uint64_t def) {
  if (!obj.is_object()) return def;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return def;
  return it->is_number_unsigned() || it->get<int64_t>() >= 0 ? it->get<uint64_t>() : def;
}

// A chat finish_reason as Anthropic's stop_reason (stop -> end_turn, length ->
// max_tokens, tool_calls -> tool_use).
inline std::string MapStopReason(const nlohmann::json& finish) {
  if (!finish.is_string()) return "end_turn";
  const std::string& f = finish.get_ref<const std::string&>();
  if (f == "length") return "max_tokens";
  if (f == "tool_calls" || f == "function_call") return "tool_use";
  return "end_turn";
}

}  // namespace infera::router::anthropic_json
