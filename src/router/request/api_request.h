// ApiRequest: a client's inference request, parsed and validated at the boundary.
//
// Parses the JSON body of POST /v1/chat/completions, /v1/completions and
// /v1/messages (Anthropic; see anthropic.h for the translation to chat) into what
// routing needs: the model, streaming, `n`, the prompt's token ids when the client
// sent them (integer-array completions prompt), otherwise a token estimate
// (string bytes / 4, skipping inline binary payloads: `data:` URLs and base64
// `data` fields), the image keys (architecture §8) and the session id.
//
// Untrusted input: every failure is an InvalidArgument status with a message fit
// for the client; nothing throws. The body is parsed with simdjson (the router's hot
// path: a short chat request costs a few microseconds); a key given twice counts
// with its last value, as in Python's json (what the engine sees). Only Anthropic
// bodies are also parsed into nlohmann::json, for the translation to chat.
//
// Thread-safety: ParseApiRequest may be called from any thread (one simdjson parser
// per thread).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/types.h"
#include "router/request/cache_control.h"
#include "simdjson.h"

namespace infera::router {

enum class ApiKind : uint8_t { kChat, kCompletions, kMessages };

// "chat", "completions", "messages" (metrics labels).
const char* ApiKindName(ApiKind kind);

struct ApiRequest {
  ApiKind kind = ApiKind::kChat;
  nlohmann::json body;      // kMessages only: the Anthropic body, for AnthropicToChat
  std::string prompt_text;  // kCompletions with a string prompt: the prompt
  std::string model;
  bool stream = false;
  uint32_t n = 1;  // choices requested (an invalid n counts as 1)
  // Token ids given by the client (integer-array prompt); otherwise nullopt.
  std::optional<std::vector<core::TokenId>> prompt_tokens;
  size_t estimated_tokens = 0;  // bytes / 4 of the prompt text (>= 1)
  std::vector<uint64_t> image_keys;
  // The body's session_id or prompt_cache_key (RequestPipeline falls back to the
  // X-Session-Id header); --session-affinity binds it to targets.
  std::string session_id;
  // The client's cache-retention hints (cache_control.h): a factor on kv-aware
  // picks' overlap weight.
  CacheRetention cache_retention;
  // The body's cache_salt (vLLM: isolates the request's prefix cache; it enters the
  // first block's hash): absent or null -> nullopt; a non-empty string, else 400 as
  // vLLM's check_cache_salt_support answers.
  std::optional<std::string> cache_salt{};
  bool has_cache_salt_key = false;  // the body names cache_salt (null included)
  // The body has a top-level data_parallel_rank or routed_dp_rank (null or a
  // non-negative integer, else the parse fails): the router's pick replaces it
  // (SGLang workers with several DP ranks) or drops it; LegRequest.
  bool client_dp_rank = false;
};

// Parses `body` for `kind`. REQUIRES: nothing; any input is handled.
// When `dom` is given and the body is valid JSON of at most 4 MiB, *dom receives the
// root element of the parse, so the caller can use the same parse again (the chat
// template renders from it). It lives in this thread's parser: valid until the next
// ParseApiRequest on the same thread — use it before any suspension point.
absl::StatusOr<ApiRequest> ParseApiRequest(ApiKind kind, std::string_view body,
                                           std::optional<simdjson::dom::element>* dom = nullptr);

// A client's X-Data-Parallel-Rank header: empty (absent) or a decimal rank below
// 2^32, else InvalidArgument (400). Its value is never forwarded: the router sets the
// header from its pick (doc/data-parallel.md).
absl::Status CheckClientDpRankHeader(std::string_view value);

}  // namespace infera::router
