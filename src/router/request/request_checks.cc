#include "router/request/request_checks.h"

#include <string>
#include <string_view>

#include "router/request/json_fields.h"

namespace infera::router {
namespace {

using json_fields::ArrayOf;
using json_fields::element;
using json_fields::Field;
using json_fields::Invalid;
using json_fields::IsEmpty;
using json_fields::object;
using json_fields::StringField;

// Type checks of the fields AnthropicToChat reads (each a string where the API says
// so), so the translation never meets a value of the wrong type.
absl::Status CheckStringField(const element& obj, std::string_view key, const std::string& where,
                              bool required) {
  auto v = Field(obj, key);
  if (!v || v->is_null()) {
    if (required) return Invalid(where + "." + std::string(key) + " is required");
    return absl::OkStatus();
  }
  if (!v->is_string()) return Invalid(where + "." + std::string(key) + " must be a string");
  return absl::OkStatus();
}

absl::Status CheckAnthropicBlock(const element& block, const std::string& where, int depth) {
  if (!block.is_object()) return Invalid(where + " must be an object");
  if (absl::Status s = CheckStringField(block, "type", where, true); !s.ok()) return s;
  const std::string_view type = StringField(block, "type").value_or("");
  if (type == "text") return CheckStringField(block, "text", where, true);
  if (type == "image" || type == "document") {
    auto src = Field(block, "source");
    if (!src) return absl::OkStatus();
    if (!src->is_object()) return Invalid(where + ".source must be an object");
    for (const char* key : {"type", "media_type", "data", "url"}) {
      if (absl::Status s = CheckStringField(*src, key, where + ".source", false); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "tool_use") {
    for (const char* key : {"id", "name"}) {
      if (absl::Status s = CheckStringField(block, key, where, false); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "tool_result") {
    if (absl::Status s = CheckStringField(block, "tool_use_id", where, false); !s.ok()) return s;
    auto content = Field(block, "content");
    if (!content || content->is_null() || content->is_string()) return absl::OkStatus();
    if (!content->is_array() || depth > 0) {
      return Invalid(where + ".content must be a string or an array of content blocks");
    }
    size_t i = 0;
    for (element inner : ArrayOf(*content)) {
      absl::Status s =
          CheckAnthropicBlock(inner, where + ".content[" + std::to_string(i++) + "]", depth + 1);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckMessages(const object& body, bool anthropic) {
  auto it = Field(body, "messages");
  if (!it) return Invalid("'messages' is required");
  if (!it->is_array()) return Invalid("'messages' must be an array");
  if (IsEmpty(*it)) return Invalid("'messages' must not be empty");
  size_t i = 0;
  for (element m : ArrayOf(*it)) {
    std::string where = "messages[" + std::to_string(i++) + "]";
    if (!m.is_object()) return Invalid(where + " must be an object");
    auto role = Field(m, "role");
    if (!role || !role->is_string()) return Invalid(where + ".role must be a string");
    auto content = Field(m, "content");
    if (content && !content->is_string() && !content->is_array() && !content->is_null()) {
      return Invalid(where + ".content must be a string or an array of content blocks");
    }
    if (anthropic && !content) return Invalid(where + ".content is required");
  }
  return absl::OkStatus();
}

absl::Status CheckAnthropicBody(const object& body) {
  auto messages = Field(body, "messages");
  size_t i = 0;
  for (element m : ArrayOf(*messages)) {  // CheckMessages made it an array of objects
    const std::string where = "messages[" + std::to_string(i++) + "]";
    auto content = Field(m, "content");
    if (!content || !content->is_array()) continue;
    size_t j = 0;
    for (element block : ArrayOf(*content)) {
      absl::Status s =
          CheckAnthropicBlock(block, where + ".content[" + std::to_string(j++) + "]", 0);
      if (!s.ok()) return s;
    }
  }
  auto system = Field(body, "system");
  if (system && system->is_array()) {
    size_t j = 0;
    for (element block : ArrayOf(*system)) {
      absl::Status s = CheckAnthropicBlock(block, "system[" + std::to_string(j++) + "]", 0);
      if (!s.ok()) return s;
    }
  }
  auto tools = Field(body, "tools");
  if (tools && !tools->is_null()) {
    if (!tools->is_array()) return Invalid("'tools' must be an array");
    size_t j = 0;
    for (element t : ArrayOf(*tools)) {
      const std::string where = "tools[" + std::to_string(j++) + "]";
      if (!t.is_object()) return Invalid(where + " must be an object");
      if (absl::Status s = CheckStringField(t, "name", where, true); !s.ok()) return s;
      if (absl::Status s = CheckStringField(t, "description", where, false); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace infera::router
