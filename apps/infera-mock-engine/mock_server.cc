#include "mock_server.h"

#include <charconv>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <nlohmann/json.hpp>

#include "tokenize_handler.h"

namespace infera::mock {
namespace {

using nlohmann::json;

http::Headers JsonHeaders() {
  http::Headers h;
  h.Add("Content-Type", "application/json");
  return h;
}

json ErrorJson(int status, const std::string& message) {
  const char* type = status == 400   ? "BadRequestError"
                     : status == 404 ? "NotFoundError"
                                     : "InternalServerError";
  return {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
}

json StatusOk() { return {{"status", "ok"}}; }

// Deepest array/object nesting accepted in a request body (as the router's parser):
// deeper bodies are refused before parsing, since walking them recurses per level.
constexpr size_t kMaxJsonDepth = 1024;

// Whether the JSON text nests arrays/objects deeper than `limit` (strings skipped;
// the text need not be valid JSON).
bool NestsDeeperThan(std::string_view text, size_t limit) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// The request body as a JSON object, or the 400 message that says why not.
absl::StatusOr<json> ParseBody(const std::string& body) {
  if (NestsDeeperThan(body, kMaxJsonDepth)) {
    return absl::InvalidArgumentError("request body nests deeper than " +
                                      std::to_string(kMaxJsonDepth) + " levels");
  }
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError("body must be a JSON object");
  }
  return parsed;
}

// The 400 text for a field of the wrong type: the library's exception text names
// its own internals ("[json.exception.type_error.302] ..."), not the request.
constexpr const char* kWrongTypeMessage =
    "a request field has the wrong type (see the OpenAI API reference for each field's type)";

json ModelsJson(const std::string& model, const std::vector<std::string>& adapters,
                size_t max_model_len) {
  json data = json::array({{{"id", model},
                            {"object", "model"},
                            {"created", 0},
                            {"owned_by", "infera-mock-engine"},
                            {"max_model_len", max_model_len}}});
  // vLLM lists each LoRA adapter with its base model as parent.
  for (const std::string& a : adapters) {
    data.push_back({{"id", a},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "infera-mock-engine"},
                    {"parent", model},
                    {"max_model_len", max_model_len}});
  }
  return {{"object", "list"}, {"data", std::move(data)}};
}

// The request's cache keys as vLLM takes them: `cache_salt` (a non-empty string, or
// absent/null; vLLM's protocol check_cache_salt_support refuses anything else) and
// the LoRA adapter `model` names (one of --lora-modules; ids count from 1).
absl::StatusOr<sim::CacheKeys> CacheKeysOf(const json& body,
                                           const std::vector<std::string>& adapters) {
  sim::CacheKeys keys;
  if (auto salt = body.find("cache_salt"); salt != body.end() && !salt->is_null()) {
    if (!salt->is_string() || salt->get_ref<const std::string&>().empty()) {
      return absl::InvalidArgumentError(
          "Parameter 'cache_salt' must be a non-empty string if provided.");
    }
    keys.cache_salt = salt->get<std::string>();
  }
  if (auto model = body.find("model"); model != body.end() && model->is_string()) {
    for (size_t i = 0; i < adapters.size(); ++i) {
      if (adapters[i] == model->get_ref<const std::string&>()) {
        keys.lora_name = adapters[i];
        keys.lora_id = static_cast<int64_t>(i + 1);
      }
    }
  }
  return keys;
}

json FinalResponse(const std::string& id, const char* object, int64_t created,
                   const std::string& model, bool chat, const std::string& text, json usage) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", "length"}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  return {{"id", id},
          {"object", object},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage", std::move(usage)}};
}

http::Awaitable<void> SendJson(http::ResponseWriter& w, int status, const json& body) {
  co_await w.Send(status, JsonHeaders(),
                  body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

http::Awaitable<void> SendError(http::ResponseWriter& w, int status, const std::string& msg) {
  co_await SendJson(w, status, ErrorJson(status, msg));
}

// Token ids from a completions "prompt"; error text on bad input.
absl::StatusOr<std::vector<core::TokenId>> PromptIds(const json& prompt,
                                                     const PromptTokenizer& tokenizer) {
  if (prompt.is_string()) return tokenizer.EncodeText(prompt.get<std::string>(), true);
  if (!prompt.is_array() || prompt.empty()) {
    return absl::InvalidArgumentError("'prompt' must be a string or an array of token ids");
  }
  if (prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) {
    return PromptIds(prompt[0], tokenizer);
  }
  std::vector<core::TokenId> ids;
  ids.reserve(prompt.size());
  for (const json& t : prompt) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > UINT32_MAX) {
      return absl::InvalidArgumentError("'prompt' token ids must be non-negative integers");
    }
    ids.push_back(static_cast<core::TokenId>(t.get<int64_t>()));
  }
  return ids;
}

// Outputs handed from the engine thread to the request's coroutine.
struct Channel {
  explicit Channel(http::asio::any_io_executor ex) : timer(ex) {}
  std::mutex mu;
  std::deque<sim::TokenOutput> queue;  // guarded by mu
  http::asio::steady_timer timer;      // used on the connection's loop only
};

}  // namespace

MockServer::MockServer(EngineRunner& runner, const PromptTokenizer& tokenizer,
                       MockServerOptions options)
    : runner_(runner), tokenizer_(tokenizer), options_(std::move(options)), rng_(options_.seed) {}

bool MockServer::ShouldFail() {
  if (options_.fail_fraction <= 0) return false;
  std::lock_guard<std::mutex> lock(rng_mu_);
  return rng_.UniformDouble() < options_.fail_fraction;
}

http::Awaitable<void> MockServer::Handle(http::Request& req, http::ResponseWriter& w) {
  const std::string_view path = req.path();
  if (req.method == "GET" && path == "/health") {
    const json ok = StatusOk();
    co_await SendJson(w, 200, ok);
  } else if (req.method == "GET" && path == "/v1/models") {
    const json models =
        ModelsJson(options_.model_name, options_.lora_modules, options_.max_model_len);
    co_await SendJson(w, 200, models);
  } else if (req.method == "GET" && path == "/metrics") {
    http::Headers headers;
    headers.Add("Content-Type", "text/plain; version=0.0.4");
    // Built before the co_await: GCC 12 evaluates both arms of a conditional inside a
    // co_await's full-expression.
    std::string text = runner_.MetricsText(options_.model_name);
    if (pd_) text += pd_->MetricsText();
    co_await w.Send(200, headers, std::move(text));
  } else if (req.method == "GET" && path == "/debug/kv-blocks") {
    co_await SendJson(w, 200, runner_.DebugDump());
  } else if (req.method == "GET" && path == "/debug/requests") {
    json list = json::array();
    {
      std::lock_guard<std::mutex> lock(recent_mu_);
      for (const json& r : recent_) list.push_back(r);
    }
    co_await SendJson(w, 200, list);
  } else if (req.method == "POST" && path == "/reset_prefix_cache") {
    if (runner_.ResetPrefixCache()) {
      const json ok = StatusOk();
      co_await SendJson(w, 200, ok);
    } else {
      co_await SendError(w, 400, "requests are running; cannot reset the prefix cache");
    }
  } else if (req.method == "POST" && path == "/tokenize") {
    co_await Tokenize(req, w);
  } else if (req.method == "POST" && path == "/v1/completions") {
    co_await Generate(req, w, /*chat=*/false);
  } else if (req.method == "POST" && path == "/v1/chat/completions") {
    co_await Generate(req, w, /*chat=*/true);
  } else {
    co_await SendError(w, 404, "no route for " + req.method + " " + std::string(path));
  }
}

http::Awaitable<void> MockServer::Tokenize(http::Request& req, http::ResponseWriter& w) {
  absl::StatusOr<json> parsed = ParseBody(req.body);
  if (!parsed.ok()) {
    co_await SendError(w, 400, std::string(parsed.status().message()));
    co_return;
  }
  absl::StatusOr<json> out = absl::InvalidArgumentError(kWrongTypeMessage);
  try {
    out = TokenizeAnswer(*parsed, options_.sglang ? TokenizeShape::kSglang : TokenizeShape::kVllm,
                         tokenizer_, options_.max_model_len);
  } catch (const json::exception&) {
    out = absl::InvalidArgumentError(kWrongTypeMessage);
  }
  if (!out.ok()) {
    co_await SendError(w, 400, std::string(out.status().message()));
    co_return;
  }
  co_await SendJson(w, 200, *out);
}

http::Awaitable<void> MockServer::Generate(http::Request& req, http::ResponseWriter& w, bool chat) {
  absl::StatusOr<json> parsed = ParseBody(req.body);
  if (!parsed.ok()) {
    co_await SendError(w, 400, std::string(parsed.status().message()));
    co_return;
  }
  const json& body = *parsed;
  absl::StatusOr<std::vector<core::TokenId>> prompt = absl::InvalidArgumentError("no prompt");
  size_t max_tokens = 16;
  bool stream = false, include_usage = false;
  std::optional<uint32_t> rank;
  std::string bad_rank;
  try {
    if (chat) {
      prompt = tokenizer_.EncodeChat(body);
    } else if (auto p = body.find("prompt"); p != body.end()) {
      prompt = PromptIds(*p, tokenizer_);
    } else {
      prompt = absl::InvalidArgumentError("'prompt' is required");
    }
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
      auto m = body.find(key);
      if (m == body.end() || m->is_null()) continue;
      if (!m->is_number_integer() || m->get<int64_t>() < 1 || m->get<int64_t>() > (1 << 20)) {
        prompt =
            absl::InvalidArgumentError(std::string("'") + key + "' must be a positive integer");
      } else {
        max_tokens = static_cast<size_t>(m->get<int64_t>());
      }
    }
    if (auto s = body.find("stream"); s != body.end() && s->is_boolean()) stream = s->get<bool>();
    if (auto so = body.find("stream_options"); so != body.end() && so->is_object()) {
      auto iu = so->find("include_usage");
      include_usage = iu != so->end() && iu->is_boolean() && iu->get<bool>();
    }
    // The rank: X-Data-Parallel-Rank (vLLM's header), else the body's
    // data_parallel_rank (SGLang's field); anything but a rank number is a 400.
    const std::string_view rank_text = req.headers.Get("X-Data-Parallel-Rank");
    auto r = body.find("data_parallel_rank");
    if (!rank_text.empty()) {
      uint32_t v = 0;
      auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), v);
      if (ec == std::errc() && end == rank_text.data() + rank_text.size()) {
        rank = v;
      } else {
        bad_rank = "X-Data-Parallel-Rank must be a non-negative integer";
      }
    } else if (r != body.end() && !r->is_null()) {
      if (r->is_number_unsigned() && r->get<uint64_t>() <= UINT32_MAX) {
        rank = r->get<uint32_t>();
      } else {
        bad_rank = "'data_parallel_rank' must be a non-negative integer";
      }
    }
  } catch (const json::exception&) {
    prompt = absl::InvalidArgumentError(kWrongTypeMessage);
  }
  if (!prompt.ok()) {
    co_await SendError(w, 400, std::string(prompt.status().message()));
    co_return;
  }
  absl::StatusOr<sim::CacheKeys> keys = CacheKeysOf(body, options_.lora_modules);
  if (!keys.ok()) {
    co_await SendError(w, 400, std::string(keys.status().message()));
    co_return;
  }
  if (prompt->empty()) {
    co_await SendError(w, 400, "the prompt is empty");
    co_return;
  }
  if (!bad_rank.empty()) {
    co_await SendError(w, 400, bad_rank);
    co_return;
  }
  if (rank.has_value() && *rank >= runner_.dp_size()) {
    co_await SendError(w, 400, "data parallel rank out of range");
    co_return;
  }
  {
    std::lock_guard<std::mutex> lock(recent_mu_);
    recent_.push_back(
        {{"path", std::string(req.path())},
         {"body", body},
         {"data_parallel_rank_header", std::string(req.headers.Get("X-Data-Parallel-Rank"))}});
    if (recent_.size() > 64) recent_.pop_front();
  }
  PdLeg leg;
  if (pd_) {
    absl::StatusOr<PdLeg> classified = pd_->Classify(body, runner_.dp_size(), rank);
    if (!classified.ok()) {
      co_await SendError(w, 400, std::string(classified.status().message()));
      co_return;
    }
    leg = *std::move(classified);
    if (leg.dp_rank) rank = leg.dp_rank;
    if (leg.kind == PdLeg::Kind::kPrefill) max_tokens = 1;  // a prefill worker only prefills
  }
  if (ShouldFail()) {
    co_await SendError(w, 500, "injected failure (--fail-fraction)");
    co_return;
  }
  const uint32_t r = rank.value_or(runner_.LeastLoadedRank());
  const size_t prompt_tokens = prompt->size();
  std::vector<core::TokenId> prefill_prompt;  // a prefill leg holds it for its decode leg
  if (leg.kind == PdLeg::Kind::kPrefill) prefill_prompt = *prompt;
  if (leg.kind == PdLeg::Kind::kDecode) {
    absl::Status received =
        co_await pd_->Receive(leg, *prompt, runner_.CachedPrefixTokens(r, *prompt, *keys));
    if (!received.ok()) {
      co_await SendError(w, 500, std::string(received.message()));
      co_return;
    }
  }

  auto channel = std::make_shared<Channel>(co_await http::asio::this_coro::executor);
  uint64_t engine_id = 0;
  const bool accepted = runner_.Submit(
      r, std::move(*prompt), max_tokens,
      [channel](const sim::TokenOutput& o) {
        {
          std::lock_guard<std::mutex> lock(channel->mu);
          channel->queue.push_back(o);
        }
        http::asio::post(channel->timer.get_executor(), [channel] { channel->timer.cancel(); });
      },
      &engine_id, /*remote_prefill=*/leg.kind == PdLeg::Kind::kDecode, *std::move(keys));
  if (!accepted) {
    co_await SendError(w, 400,
                       "prompt of " + std::to_string(prompt_tokens) +
                           " tokens (+ max_tokens) does not fit the KV cache");
    co_return;
  }
  w.OnClientGone([this, r, engine_id, channel] {
    runner_.Abort(r, engine_id);
    channel->timer.cancel();
  });

  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_.fetch_add(1));
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const char* object =
      chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  auto usage = [&](uint32_t cached, size_t completion) {
    return json{{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion},
                {"total_tokens", prompt_tokens + completion},
                {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  };
  auto chunk = [&](const std::string& text, const char* finish, bool first) {
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (finish) choice["finish_reason"] = finish;
    if (chat) {
      json delta = json::object();
      if (first) delta["role"] = "assistant";
      if (!text.empty() || !first) delta["content"] = text;
      choice["delta"] = delta;
    } else {
      choice["text"] = text;
    }
    return json{{"id", id},
                {"object", object},
                {"created", created},
                {"model", options_.model_name},
                {"choices", json::array({choice})}};
  };

  if (stream) {
    http::Headers h;
    h.Add("Content-Type", "text/event-stream");
    h.Add("Cache-Control", "no-cache");
    if (!co_await w.BeginStream(200, std::move(h))) {
      runner_.Abort(r, engine_id);
      co_return;
    }
  }
  std::string text;
  size_t produced = 0;
  uint32_t cached = 0;
  bool done = false;
  json pd_fields;  // a prefill leg's answer to its decode leg (nixl: kv_transfer_params)
  while (!done) {
    std::deque<sim::TokenOutput> batch;
    {
      std::lock_guard<std::mutex> lock(channel->mu);
      batch.swap(channel->queue);
    }
    if (batch.empty()) {
      if (w.client_gone()) co_return;
      channel->timer.expires_after(std::chrono::hours(1));
      boost::system::error_code ec;
      co_await channel->timer.async_wait(http::asio::redirect_error(http::asio::use_awaitable, ec));
      continue;
    }
    std::string piece;
    for (const sim::TokenOutput& o : batch) {
      if (o.index == 0) cached = o.cached_tokens;
      piece += PromptTokenizer::TokenText(o.token);
      ++produced;
      done = done || o.finished;
    }
    if (done && leg.kind == PdLeg::Kind::kPrefill) pd_fields = pd_->Hold(leg, prefill_prompt);
    if (stream) {
      std::string sse =
          "data: " + chunk(piece, done ? "length" : nullptr, produced == batch.size()).dump() +
          "\n\n";
      if (done && include_usage) {
        json u = {{"id", id},
                  {"object", object},
                  {"created", created},
                  {"model", options_.model_name},
                  {"choices", json::array()},
                  {"usage", usage(cached, produced)}};
        sse += "data: " + u.dump() + "\n\n";
      }
      if (done) sse += "data: [DONE]\n\n";
      if (!co_await w.WriteChunk(sse)) {
        runner_.Abort(r, engine_id);
        co_return;
      }
    } else {
      text += piece;
    }
  }
  if (stream) {
    co_await w.EndStream();
  } else {
    json out = FinalResponse(id, object, created, options_.model_name, chat, text,
                             usage(cached, produced));
    if (pd_fields.is_object()) out.update(pd_fields);
    co_await SendJson(w, 200, out);
  }
  const uint64_t served = served_.fetch_add(1) + 1;
  if (options_.die_after_requests > 0 && served >= options_.die_after_requests) {
    std::fprintf(stderr, "infera-mock-engine: dying after %llu requests (--die-after)\n",
                 static_cast<unsigned long long>(served));
    std::_Exit(3);
  }
}

}  // namespace infera::mock
