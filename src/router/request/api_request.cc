#include "router/request/api_request.h"

#include "router/request/json_fields.h"
#include "router/request/prompt_scan.h"
#include "router/request/request_checks.h"

namespace infera::router {
namespace {

using json_fields::ArrayOf;
using json_fields::element;
using json_fields::Field;
using json_fields::IntegerValue;
using json_fields::Invalid;
using json_fields::IsEmpty;
using json_fields::IsInteger;
using json_fields::object;
using json_fields::StringField;

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

// The fields every API shares: model, stream, n, a client's DP rank, cache_salt, the
// session id and the cache-retention hints.
absl::Status ParseCommonFields(const object& b, const element& doc, ApiRequest& req) {
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
  return absl::OkStatus();
}

absl::Status ParseChat(const object& b, const element& doc, ApiRequest& req) {
  if (absl::Status s = CheckMessages(b, false); !s.ok()) return s;
  auto tools = Field(b, "tools");
  req.estimated_tokens =
      EstimateTokens(*Field(b, "messages")) + (tools ? EstimateTokens(*tools) - 1 : 0);
  req.image_keys = CollectImageKeys(doc);
  return absl::OkStatus();
}

// `body`: the raw bytes, parsed again into nlohmann::json for the translation to chat.
absl::Status ParseMessages(const object& b, const element& doc, std::string_view body,
                           ApiRequest& req) {
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
  return absl::OkStatus();
}

// `prompt`: a string, an array of token ids, or a batch of either (routed by the
// estimate).
absl::Status ParsePrompt(const element& prompt, ApiRequest& req) {
  if (prompt.is_string()) {
    req.prompt_text = std::string(prompt.get_string().value_unsafe());
    req.estimated_tokens = EstimateTokens(prompt);
  } else if (prompt.is_array() && !IsEmpty(prompt) && prompt.at(0).value_unsafe().is_number()) {
    std::vector<core::TokenId> ids;
    for (element t : ArrayOf(prompt)) {
      if (!IsInteger(t) || IntegerValue(t) < 0 || IntegerValue(t) > int64_t{0xFFFFFFFF}) {
        return Invalid("'prompt' token ids must be non-negative 32-bit integers");
      }
      ids.push_back(static_cast<core::TokenId>(IntegerValue(t)));
    }
    req.estimated_tokens = ids.size();
    req.prompt_tokens = std::move(ids);
  } else if (prompt.is_array() && !IsEmpty(prompt)) {
    // A batch of prompts (strings or id arrays): routed by the estimate.
    for (element p : ArrayOf(prompt)) {
      if (!p.is_string() && !p.is_array()) {
        return Invalid("'prompt' must be a string, an array of token ids, or a batch");
      }
    }
    req.estimated_tokens = EstimateTokens(prompt);
  } else {
    return Invalid("'prompt' must be a string or an array of token ids");
  }
  return absl::OkStatus();
}

absl::Status ParseCompletions(const object& b, const element& doc, ApiRequest& req) {
  auto prompt = Field(b, "prompt");
  if (!prompt) return Invalid("'prompt' is required");
  if (absl::Status s = ParsePrompt(*prompt, req); !s.ok()) return s;
  // A top-level `images` list (architecture §8) counts here as on chat: the text's
  // blocks cannot tell one image from another.
  req.image_keys = CollectImageKeys(doc);
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
  if (absl::Status s = ParseCommonFields(b, doc, req); !s.ok()) return s;
  absl::Status checked;
  switch (kind) {
    case ApiKind::kChat:
      checked = ParseChat(b, doc, req);
      break;
    case ApiKind::kMessages:
      checked = ParseMessages(b, doc, body, req);
      break;
    case ApiKind::kCompletions:
      checked = ParseCompletions(b, doc, req);
      break;
  }
  if (!checked.ok()) return checked;
  return req;
}

}  // namespace infera::router
