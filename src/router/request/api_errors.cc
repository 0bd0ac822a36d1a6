#include "router/request/api_errors.h"

#include <nlohmann/json.hpp>

#include "router/request/anthropic.h"

namespace infera::router {

using nlohmann::json;

std::string OpenAiErrorBody(int status, std::string_view message, const char* code) {
  const char* type = status == 404   ? "not_found_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? (status == 503 ? "service_unavailable" : "server_error")
                                     : "invalid_request_error";
  // OpenAI's `code` is a string or null, never the HTTP status.
  json j = {
      {"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
  if (code != nullptr) j["error"]["code"] = code;
  // Messages may quote client bytes (a path, a header) that are not UTF-8.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ErrorBodyFor(ApiKind kind, int status, std::string_view message, const char* code) {
  return kind == ApiKind::kMessages ? AnthropicErrorBody(status, message)
                                    : OpenAiErrorBody(status, message, code);
}

std::string UpstreamMessage(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
    if (e.is_string()) return e.get<std::string>();
  }
  if (j.is_object() && j.contains("message") && j["message"].is_string()) {
    return j["message"].get<std::string>();
  }
  return body.substr(0, 500);
}

std::string UpstreamStatusMessage(std::string_view who, int status,
                                  const absl::StatusOr<std::string>& body) {
  std::string out(who);
  out.append(" answered ").append(std::to_string(status));
  if (body.ok()) out.append(": ").append(UpstreamMessage(*body));
  return out;
}

http::Awaitable<void> SendJson(http::ResponseWriter& w, int status, const std::string& body,
                               const std::string& request_id) {
  http::Headers h;
  h.Add("Content-Type", "application/json");
  if (!request_id.empty()) h.Add("X-Infera-Request-Id", request_id);
  co_await w.Send(status, std::move(h), body);
}

http::Awaitable<void> SendError(http::ResponseWriter& w, ApiKind kind, int status,
                                std::string message, const std::string& request_id,
                                const char* code) {
  co_await SendJson(w, status, ErrorBodyFor(kind, status, message, code), request_id);
}

}  // namespace infera::router
