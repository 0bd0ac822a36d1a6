#include "router/request/prompt_scan.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "core/image_affinity.h"
#include "router/request/json_fields.h"

namespace infera::router {
namespace {

using json_fields::ArrayOf;
using json_fields::element;
using json_fields::element_type;
using json_fields::Field;
using json_fields::ObjectOf;
using json_fields::StringField;

bool IsDataUrl(std::string_view s) { return s.substr(0, 5) == "data:"; }

// Bytes of prompt text under `v`: every string value, except `data:` URLs and the
// values of "data" keys (base64 payloads).
void AddBytes(const element& v, size_t& bytes) {
  switch (v.type()) {
    case element_type::STRING: {
      std::string_view s = v.get_string().value_unsafe();
      if (!IsDataUrl(s)) bytes += s.size();
      break;
    }
    case element_type::ARRAY:
      for (element e : ArrayOf(v)) AddBytes(e, bytes);
      break;
    case element_type::OBJECT:
      for (const simdjson::dom::key_value_pair& f : ObjectOf(v)) {
        if (f.key == "data") continue;
        AddBytes(f.value, bytes);
      }
      break;
    default:
      break;
  }
}

void AddRef(const std::optional<element>& v, std::vector<uint64_t>& keys) {
  std::string_view s;
  if (v && v->get_string().get(s) == simdjson::SUCCESS) keys.push_back(core::ImageKey(s));
}

// One content block in OpenAI or Anthropic shape.
void CollectFromBlock(const element& block, std::vector<uint64_t>& keys) {
  auto type = StringField(block, "type");
  if (!type) return;
  if (*type == "image_url") {
    auto it = Field(block, "image_url");
    if (it) {
      auto url = Field(*it, "url");
      AddRef(url ? url : it, keys);
    }
  } else if (*type == "input_audio") {
    if (auto it = Field(block, "input_audio")) AddRef(Field(*it, "data"), keys);
  } else if (*type == "image" || *type == "document" || *type == "file" || *type == "video" ||
             *type == "audio") {
    auto src = Field(block, "source");
    if (src && src->is_object()) {
      if (auto url = Field(*src, "url")) {
        AddRef(url, keys);
      } else if (auto data = Field(*src, "data")) {
        std::string_view media = StringField(*src, "media_type").value_or("");
        std::string_view payload;
        if (data->get_string().get(payload) == simdjson::SUCCESS) {
          std::string ref = "data:";
          ref.append(media).append(";base64,").append(payload);
          keys.push_back(core::ImageKey(ref));
        }
      }
    } else {
      for (const char* field : {"image", "url", "file", "video", "audio"}) {
        AddRef(Field(block, field), keys);
      }
    }
  }
}

}  // namespace

size_t EstimateTokens(const element& v) {
  size_t bytes = 0;
  AddBytes(v, bytes);
  return std::max<size_t>(1, bytes / 4);
}

std::vector<uint64_t> CollectImageKeys(const element& body) {
  std::vector<uint64_t> keys;
  auto messages = Field(body, "messages");
  if (messages && messages->is_array()) {
    for (element m : ArrayOf(*messages)) {
      auto content = Field(m, "content");
      if (!content || !content->is_array()) continue;
      for (element block : ArrayOf(*content)) {
        CollectFromBlock(block, keys);
        // Anthropic tool_result blocks nest content blocks.
        auto inner = Field(block, "content");
        if (inner && inner->is_array()) {
          for (element e : ArrayOf(*inner)) CollectFromBlock(e, keys);
        }
      }
    }
  }
  auto images = Field(body, "images");
  if (images && images->is_array()) {
    for (element img : ArrayOf(*images)) AddRef(img, keys);
  }
  return keys;
}

}  // namespace infera::router
