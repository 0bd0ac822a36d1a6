// libFuzzer target: arbitrary bytes as a template source, parsed and rendered with a fixed
// chat-like context under tight limits. Any crash, sanitizer report, hang or exception
// escaping Template::Parse/Render is a bug; errors must come back as absl::Status.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "template/template.h"

namespace {

const infera::jinja::Dict& Context() {
  static const infera::jinja::Dict context = [] {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(R"({
      "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
      "tools": [{"type": "function", "function": {"name": "get_weather",
                 "parameters": {"type": "object", "properties": {"loc": {"type": "string"}}}}}],
      "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi \u00e9 \ud83d\ude00"},
        {"role": "assistant", "content": "<think>\nx\n</think>\n\ny",
         "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
        {"role": "tool", "content": "42"},
        {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}]})");
    return infera::jinja::Value::FromJson(j).dict();
  }();
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  std::string_view source(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<infera::jinja::Template> t = infera::jinja::Template::Parse(source);
  if (!t.ok()) return 0;
  infera::jinja::RenderOptions options;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_loop_iterations = 20'000;
  options.limits.max_call_depth = 32;
  std::tm now{};
  now.tm_year = 126;
  now.tm_mday = 1;
  options.now = now;
  absl::StatusOr<std::string> out = t->Render(Context(), options);
  (void)out;
  return 0;
}
