// Client request bodies: the first byte picks the endpoint (chat, completions,
// messages), the rest is the body. Whatever ParseApiRequest accepts must translate
// (Anthropic -> chat) and serialise; the response translation gets the same bytes as
// an upstream chat.completion. Nothing may crash, hang or throw.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "router/request/anthropic.h"
#include "router/request/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using infera::router::ApiKind;
  const ApiKind kind = static_cast<ApiKind>(data[0] % 3);
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  std::optional<simdjson::dom::element> dom;
  auto parsed = infera::router::ParseApiRequest(kind, body, &dom);
  if (parsed.ok() && kind == ApiKind::kMessages) {
    nlohmann::json chat = infera::router::AnthropicToChat(parsed->body);
    (void)chat.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  nlohmann::json upstream = nlohmann::json::parse(body, nullptr, false);
  if (!upstream.is_discarded()) {
    (void)infera::router::ChatResponseToAnthropic(upstream, "m", "r")
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
