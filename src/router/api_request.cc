#include "router/api_request.h"

#include <algorithm>

#include "core/image_affinity.h"

namespace infera::router {
namespace {

using nlohmann::json;

bool IsDataUrl(std::string_view s) { return s.substr(0, 5) == "data:"; }

void AddBytes(const json& v, size_t& bytes) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (!IsDataUrl(s)) bytes += s.size();
  } else if (v.is_array()) {
    for (const auto& e : v) AddBytes(e, bytes);
  } else if (v.is_object()) {
    for (const auto& [k, e] : v.items()) {
      if (k == "data") continue;  // base64 payloads (images, audio)
      AddBytes(e, bytes);
    }
  }
}

void AddRef(const json& v, std::vector<uint64_t>& keys) {
  if (v.is_string()) keys.push_back(core::ImageKey(v.get_ref<const std::string&>()));
}

// One content block in OpenAI or Anthropic shape.
void CollectFromBlock(const json& block, std::vector<uint64_t>& keys) {
  if (!block.is_object()) return;
  auto type_it = block.find("type");
  if (type_it == block.end() || !type_it->is_string()) return;
  const std::string& type = type_it->get_ref<const std::string&>();
  if (type == "image_url") {
    auto it = block.find("image_url");
    if (it != block.end()) {
      if (it->is_object() && it->contains("url"))
        AddRef((*it)["url"], keys);
      else
        AddRef(*it, keys);
    }
  } else if (type == "input_audio") {
    auto it = block.find("input_audio");
    if (it != block.end() && it->is_object() && it->contains("data")) {
      AddRef((*it)["data"], keys);
    }
  } else if (type == "image" || type == "document" || type == "file" || type == "video" ||
             type == "audio") {
    auto src = block.find("source");
    if (src != block.end() && src->is_object()) {
      if (src->contains("url")) {
        AddRef((*src)["url"], keys);
      } else if (src->contains("data")) {
        std::string media = src->value("media_type", "");
        const json& data = (*src)["data"];
        if (data.is_string()) {
          keys.push_back(
              core::ImageKey("data:" + media + ";base64," + data.get_ref<const std::string&>()));
        }
      }
    } else {
      for (const char* field : {"image", "url", "file", "video", "audio"}) {
        if (block.contains(field)) AddRef(block[field], keys);
      }
    }
  }
}

absl::Status Invalid(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

absl::Status CheckMessages(const json& body, bool anthropic) {
  auto it = body.find("messages");
  if (it == body.end()) return Invalid("'messages' is required");
  if (!it->is_array()) return Invalid("'messages' must be an array");
  if (it->empty()) return Invalid("'messages' must not be empty");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return Invalid(where + " must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return Invalid(where + ".role must be a string");
    auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_array() &&
        !content->is_null()) {
      return Invalid(where + ".content must be a string or an array of content blocks");
    }
    if (anthropic && content == m.end()) return Invalid(where + ".content is required");
  }
  return absl::OkStatus();
}

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

size_t EstimateTokens(const json& value) {
  size_t bytes = 0;
  AddBytes(value, bytes);
  return std::max<size_t>(1, bytes / 4);
}

std::vector<uint64_t> CollectImageKeys(const json& body) {
  std::vector<uint64_t> keys;
  auto messages = body.find("messages");
  if (messages != body.end() && messages->is_array()) {
    for (const auto& m : *messages) {
      if (!m.is_object()) continue;
      auto content = m.find("content");
      if (content == m.end() || !content->is_array()) continue;
      for (const auto& block : *content) {
        CollectFromBlock(block, keys);
        // Anthropic tool_result blocks nest content blocks.
        if (block.is_object() && block.contains("content") && block["content"].is_array()) {
          for (const auto& inner : block["content"]) CollectFromBlock(inner, keys);
        }
      }
    }
  }
  auto images = body.find("images");
  if (images != body.end() && images->is_array()) {
    for (const auto& img : *images) AddRef(img, keys);
  }
  return keys;
}

absl::StatusOr<ApiRequest> ParseApiRequest(ApiKind kind, std::string_view body) {
  ApiRequest req;
  req.kind = kind;
  req.body = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (req.body.is_discarded()) return Invalid("request body is not valid JSON");
  if (!req.body.is_object()) return Invalid("request body must be a JSON object");
  const json& b = req.body;

  auto model = b.find("model");
  if (model == b.end()) return Invalid("'model' is required");
  if (!model->is_string()) return Invalid("'model' must be a string");
  req.model = model->get<std::string>();

  auto stream = b.find("stream");
  if (stream != b.end() && !stream->is_null()) {
    if (!stream->is_boolean()) return Invalid("'stream' must be a boolean");
    req.stream = stream->get<bool>();
  }
  auto n = b.find("n");
  if (n != b.end() && n->is_number_integer() && n->get<int64_t>() >= 1 &&
      n->get<int64_t>() <= 1'000'000) {
    req.n = static_cast<uint32_t>(n->get<int64_t>());
  }
  for (const char* key : {"session_id", "prompt_cache_key"}) {
    auto it = b.find(key);
    if (it != b.end() && it->is_string() && req.session_id.empty()) {
      req.session_id = it->get<std::string>();
    }
  }

  switch (kind) {
    case ApiKind::kChat: {
      if (absl::Status s = CheckMessages(b, false); !s.ok()) return s;
      req.estimated_tokens = EstimateTokens(b["messages"]) +
                             (b.contains("tools") ? EstimateTokens(b["tools"]) - 1 : 0);
      req.image_keys = CollectImageKeys(b);
      break;
    }
    case ApiKind::kMessages: {
      if (absl::Status s = CheckMessages(b, true); !s.ok()) return s;
      auto max_tokens = b.find("max_tokens");
      if (max_tokens == b.end()) return Invalid("'max_tokens' is required");
      if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1) {
        return Invalid("'max_tokens' must be a positive integer");
      }
      auto system = b.find("system");
      if (system != b.end() && !system->is_string() && !system->is_array()) {
        return Invalid("'system' must be a string or an array of text blocks");
      }
      req.estimated_tokens =
          EstimateTokens(b["messages"]) + (system != b.end() ? EstimateTokens(*system) : 0);
      req.image_keys = CollectImageKeys(b);
      break;
    }
    case ApiKind::kCompletions: {
      auto prompt = b.find("prompt");
      if (prompt == b.end()) return Invalid("'prompt' is required");
      if (prompt->is_string()) {
        req.estimated_tokens = EstimateTokens(*prompt);
      } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
        std::vector<core::TokenId> ids;
        ids.reserve(prompt->size());
        for (const auto& t : *prompt) {
          if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
              t.get<int64_t>() > int64_t{0xFFFFFFFF}) {
            return Invalid("'prompt' token ids must be non-negative 32-bit integers");
          }
          ids.push_back(static_cast<core::TokenId>(t.get<int64_t>()));
        }
        req.estimated_tokens = ids.size();
        req.prompt_tokens = std::move(ids);
      } else if (prompt->is_array() && !prompt->empty()) {
        // A batch of prompts (strings or id arrays): routed by the estimate.
        for (const auto& p : *prompt) {
          if (!p.is_string() && !p.is_array()) {
            return Invalid("'prompt' must be a string, an array of token ids, or a batch");
          }
        }
        req.estimated_tokens = EstimateTokens(*prompt);
      } else {
        return Invalid("'prompt' must be a string or an array of token ids");
      }
      break;
    }
  }
  return req;
}

}  // namespace infera::router
