#include "router/request/anthropic_transform.h"

#include <nlohmann/json.hpp>

#include "router/request/anthropic.h"
#include "router/request/api_errors.h"

namespace infera::router {

std::string AnthropicTransform::Whole(int status, std::string body) {
  if (status != 200) return AnthropicErrorBody(status, UpstreamMessage(body));
  nlohmann::json chat = nlohmann::json::parse(body, nullptr, false);
  return ChatResponseToAnthropic(chat.is_discarded() ? nlohmann::json::object() : chat, model_,
                                 request_id_)
      .dump();
}

std::string AnthropicTransform::ErrorEvent(std::string_view message) {
  return "event: error\ndata: " + AnthropicErrorBody(502, message) + "\n\n";
}

}  // namespace infera::router
