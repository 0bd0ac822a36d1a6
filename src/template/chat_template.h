// ChatTemplate: renders an OpenAI-style chat request into the prompt text a model's
// Hugging Face chat template produces, the way vLLM/transformers build the context:
//
//   messages, tools (null when absent), documents (null when absent),
//   add_generation_prompt (default true), the tokenizer config's special tokens
//   (bos_token, eos_token, ... as strings; {"content": ...} objects unwrapped), and the
//   request's chat_template_kwargs merged on top (e.g. enable_thinking).
//   A message content that is a list of text parts ([{"type": "text", "text": ...}])
//   is joined with "\n" into one string first, as vLLM does for templates of its
//   "string" content format — unless the template loops over a message's content
//   (vLLM's "openai" format), which then gets the list as sent.
//
//   absl::StatusOr<ChatTemplate> chat = ChatTemplate::Load("/models/qwen3");
//   absl::StatusOr<std::string> prompt = chat->RenderJson(R"({"messages": [...]})");
//
// The template comes from chat_template.jinja when that file exists, otherwise from
// tokenizer_config.json "chat_template": a string, or a list of {name, template} where
// "tool_use" is used when the request has tools and "default" otherwise.
//
// Errors: Load → NotFound / InvalidArgument (missing files, bad JSON, no template, template
// syntax errors); Render → InvalidArgument for a malformed request or a template error
// (with the template's message), ResourceExhausted for a render limit.
//
// Thread-safety: immutable after Load; Render may be called concurrently.
#pragma once

#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "simdjson.h"
#include "template/template.h"

namespace infera::chat {

// What a "string"-format template (one that does not loop over a message's content)
// sees for each multimodal content part (doc/chat-template.md "Multimodal parts").
struct MultimodalPlaceholders {
  std::string image = "<image>";
  std::string audio = "<audio>";
  std::string video = "<video>";
};

class ChatTemplate {
 public:
  // dir holds tokenizer_config.json (and optionally chat_template.jinja).
  static absl::StatusOr<ChatTemplate> Load(const std::string& dir);
  // From tokenizer_config.json text, with an optional chat_template.jinja source that
  // takes precedence over the config's chat_template.
  static absl::StatusOr<ChatTemplate> FromConfig(std::string_view config_json,
                                                 std::optional<std::string> jinja_source);

  // request_body: the chat completion request. Object key order is kept (it is visible
  // through tojson), so prefer ordered_json or RenderJson.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& request_body,
                                     std::optional<std::tm> now = std::nullopt) const;
  // nlohmann::json sorts object keys: output of `tojson` on request objects follows that
  // order instead of the request's.
  absl::StatusOr<std::string> Render(const nlohmann::json& request_body,
                                     std::optional<std::tm> now = std::nullopt) const;
  // Renders a request body already parsed by simdjson (key order is the document's).
  absl::StatusOr<std::string> RenderDom(const simdjson::dom::element& request_body,
                                        std::optional<std::tm> now = std::nullopt) const;
  // Parses the request body text (keeping key order) and renders it.
  absl::StatusOr<std::string> RenderJson(std::string_view request_body,
                                         std::optional<std::tm> now = std::nullopt) const;

  const jinja::Dict& special_tokens() const { return special_tokens_; }
  const MultimodalPlaceholders& placeholders() const { return placeholders_; }

 private:
  ChatTemplate() = default;
  // The request body as a template value (a dict): messages, tools, documents,
  // add_generation_prompt, chat_template_kwargs.
  absl::StatusOr<std::string> RenderBody(const jinja::Value& body,
                                         std::optional<std::tm> now) const;

  std::optional<jinja::Template> default_;
  std::optional<jinja::Template> tool_use_;
  // Whether each template loops over message content (vLLM's "openai" format).
  bool default_openai_format_ = false;
  bool tool_use_openai_format_ = false;
  jinja::Dict special_tokens_;
  MultimodalPlaceholders placeholders_;
};

// Parses "YYYY-MM-DD", "YYYY-MM-DDTHH:MM[:SS[.fff]]" with an optional "Z" or "±HH:MM"
// suffix (ignored: the wall-clock fields are used as given) into a broken-down time.
absl::StatusOr<std::tm> ParseIsoTime(std::string_view text);

}  // namespace infera::chat
