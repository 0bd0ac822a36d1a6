#include "router/request/api_request.h"

#include <algorithm>

#include "core/image_affinity.h"

namespace infera::router {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

bool IsDataUrl(std::string_view s) { return s.substr(0, 5) == "data:"; }

// The value of `key` in `obj` (the last one if the key repeats, as Python's json
// keeps), or nullopt.
std::optional<element> Field(const object& obj, std::string_view key) {
  std::optional<element> found;
  for (const simdjson::dom::key_value_pair& f : obj) {
    if (f.key == key) found = f.value;
  }
  return found;
}

std::optional<element> Field(const element& e, std::string_view key) {
  object obj;
  if (e.get_object().get(obj) != simdjson::SUCCESS) return std::nullopt;
  return Field(obj, key);
}

std::optional<std::string_view> StringField(const element& e, std::string_view key) {
  auto v = Field(e, key);
  std::string_view s;
  if (!v || v->get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  return s;
}

bool IsInteger(const element& e) {
  return e.type() == element_type::INT64 || e.type() == element_type::UINT64;
}

// Integer value clamped into int64 (UINT64 values above INT64_MAX saturate).
int64_t IntegerValue(const element& e) {
  if (e.type() == element_type::UINT64) {
    uint64_t u = e.get_uint64().value_unsafe();
    return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  }
  return e.get_int64().value_unsafe();
}

array ArrayOf(const element& e) { return e.get_array().value_unsafe(); }     // REQUIRES: an array
object ObjectOf(const element& e) { return e.get_object().value_unsafe(); }  // REQUIRES: an object

bool IsEmpty(const element& e) {
  if (e.type() == element_type::ARRAY) {
    array a = e.get_array().value_unsafe();
    return a.begin() == a.end();
  }
  if (e.type() == element_type::OBJECT) {
    object o = e.get_object().value_unsafe();
    return o.begin() == o.end();
  }
  return false;
}

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

size_t EstimateTokens(const element& v) {
  size_t bytes = 0;
  AddBytes(v, bytes);
  return std::max<size_t>(1, bytes / 4);
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

absl::Status Invalid(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

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

// What is wrong with a body simdjson refused, in the client's terms.
absl::Status ParseError(simdjson::error_code error) {
  switch (error) {
    case simdjson::NUMBER_ERROR:
    case simdjson::NUMBER_OUT_OF_RANGE:
      return Invalid(
          "request body has a malformed or out-of-range number (integers must fit in 64 "
          "bits: at most 18446744073709551615)");
    case simdjson::DEPTH_ERROR:
      return Invalid("request body nests deeper than 1024 levels");
    default:
      return Invalid("request body is not valid JSON");
  }
}

// One parser per thread: it keeps its buffers between requests. Bodies larger than
// kKeepBytes are parsed by a temporary parser so a rare huge body does not pin
// memory for the thread's lifetime.
constexpr size_t kKeepBytes = 4 << 20;

}  // namespace

const char* ApiKindName(ApiKind kind) {
  switch (kind) {
    case ApiKind::kChat:
      return "chat";
    case ApiKind::kCompletions:
      return "completions";
    case ApiKind::kMessages:
      return "messages";
  }
  return "chat";
}

absl::Status CheckClientDpRankHeader(std::string_view value) {
  if (value.empty()) return absl::OkStatus();
  uint64_t rank = 0;
  for (char c : value) {
    if (c < '0' || c > '9' || value.size() > 10) {
      return Invalid("X-Data-Parallel-Rank must be a non-negative integer");
    }
    rank = rank * 10 + static_cast<uint64_t>(c - '0');
  }
  if (rank > UINT32_MAX) return Invalid("X-Data-Parallel-Rank must be a non-negative integer");
  return absl::OkStatus();
}

absl::StatusOr<ApiRequest> ParseApiRequest(ApiKind kind, std::string_view body,
                                           std::optional<simdjson::dom::element>* dom) {
  ApiRequest req;
  req.kind = kind;
  thread_local simdjson::dom::parser shared_parser;
  std::optional<simdjson::dom::parser> own_parser;
  simdjson::dom::parser* parser = &shared_parser;
  if (body.size() > kKeepBytes) parser = &own_parser.emplace();
  element doc;
  if (simdjson::error_code error = parser->parse(body.data(), body.size()).get(doc);
      error != simdjson::SUCCESS) {
    return ParseError(error);
  }
  if (dom != nullptr && parser == &shared_parser) *dom = doc;
  object b;
  if (doc.get_object().get(b) != simdjson::SUCCESS) {
    return Invalid("request body must be a JSON object");
  }

  auto model = Field(b, "model");
  if (!model) return Invalid("'model' is required");
  if (!model->is_string()) return Invalid("'model' must be a string");
  req.model = std::string(model->get_string().value_unsafe());

  auto stream = Field(b, "stream");
  if (stream && !stream->is_null()) {
    if (!stream->is_bool()) return Invalid("'stream' must be a boolean");
    req.stream = stream->get_bool().value_unsafe();
  }
  auto n = Field(b, "n");
  if (n && IsInteger(*n) && IntegerValue(*n) >= 1 && IntegerValue(*n) <= 1'000'000) {
    req.n = static_cast<uint32_t>(IntegerValue(*n));
  }
  // A client's rank is checked, then replaced by the pick's (doc/data-parallel.md).
  for (const char* key : {"data_parallel_rank", "routed_dp_rank"}) {
    auto rank = Field(b, key);
    if (!rank) continue;
    req.client_dp_rank = true;
    if (rank->is_null()) continue;
    if (!IsInteger(*rank) || IntegerValue(*rank) < 0 || IntegerValue(*rank) > UINT32_MAX) {
      return Invalid(std::string("'") + key + "' must be a non-negative integer");
    }
  }
  auto salt = Field(b, "cache_salt");
  req.has_cache_salt_key = salt.has_value();
  if (salt && !salt->is_null()) {
    std::string_view v;
    if (salt->get_string().get(v) != simdjson::SUCCESS || v.empty()) {
      return Invalid("Parameter 'cache_salt' must be a non-empty string if provided.");
    }
    req.cache_salt = std::string(v);
  }
  for (const char* key : {"session_id", "prompt_cache_key"}) {
    auto it = StringField(doc, key);
    if (it && req.session_id.empty()) req.session_id = std::string(*it);
  }
  req.cache_retention = ParseCacheRetention(doc);

  switch (kind) {
    case ApiKind::kChat: {
      if (absl::Status s = CheckMessages(b, false); !s.ok()) return s;
      auto tools = Field(b, "tools");
      req.estimated_tokens =
          EstimateTokens(*Field(b, "messages")) + (tools ? EstimateTokens(*tools) - 1 : 0);
      req.image_keys = CollectImageKeys(doc);
      break;
    }
    case ApiKind::kMessages: {
      if (absl::Status s = CheckMessages(b, true); !s.ok()) return s;
      if (absl::Status s = CheckAnthropicBody(b); !s.ok()) return s;
      auto max_tokens = Field(b, "max_tokens");
      if (!max_tokens) return Invalid("'max_tokens' is required");
      if (!IsInteger(*max_tokens) || IntegerValue(*max_tokens) < 1) {
        return Invalid("'max_tokens' must be a positive integer");
      }
      auto system = Field(b, "system");
      if (system && !system->is_string() && !system->is_array()) {
        return Invalid("'system' must be a string or an array of text blocks");
      }
      req.estimated_tokens =
          EstimateTokens(*Field(b, "messages")) + (system ? EstimateTokens(*system) : 0);
      req.image_keys = CollectImageKeys(doc);
      // The translation to chat works on nlohmann::json; the body is valid JSON here.
      req.body = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (req.body.is_discarded()) return Invalid("request body is not valid JSON");
      break;
    }
    case ApiKind::kCompletions: {
      auto prompt = Field(b, "prompt");
      if (!prompt) return Invalid("'prompt' is required");
      if (prompt->is_string()) {
        req.prompt_text = std::string(prompt->get_string().value_unsafe());
        req.estimated_tokens = EstimateTokens(*prompt);
      } else if (prompt->is_array() && !IsEmpty(*prompt) &&
                 prompt->at(0).value_unsafe().is_number()) {
        std::vector<core::TokenId> ids;
        for (element t : ArrayOf(*prompt)) {
          if (!IsInteger(t) || IntegerValue(t) < 0 || IntegerValue(t) > int64_t{0xFFFFFFFF}) {
            return Invalid("'prompt' token ids must be non-negative 32-bit integers");
          }
          ids.push_back(static_cast<core::TokenId>(IntegerValue(t)));
        }
        req.estimated_tokens = ids.size();
        req.prompt_tokens = std::move(ids);
      } else if (prompt->is_array() && !IsEmpty(*prompt)) {
        // A batch of prompts (strings or id arrays): routed by the estimate.
        for (element p : ArrayOf(*prompt)) {
          if (!p.is_string() && !p.is_array()) {
            return Invalid("'prompt' must be a string, an array of token ids, or a batch");
          }
        }
        req.estimated_tokens = EstimateTokens(*prompt);
      } else {
        return Invalid("'prompt' must be a string or an array of token ids");
      }
      // A top-level `images` list (architecture §8) counts here as on chat: the text's
      // blocks cannot tell one image from another.
      req.image_keys = CollectImageKeys(doc);
      break;
    }
  }
  return req;
}

}  // namespace infera::router
