#include "router/router.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "router/anthropic.h"
#include "router/api_request.h"
#include "router/circuit_breaker.h"
#include "spdlog/spdlog.h"
#include "template/chat_template.h"
#include "tokenizer/prefix_caching_encoder.h"
#include "tokenizer/tokenizer.h"

namespace infera::router {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string Label(std::string_view name, std::string_view value) {
  return std::string(name) + "=\"" + EscapeLabel(value) + "\"";
}

// Label sets used on every request, built once.
const std::string kStageParse = Label("stage", "parse");
const std::string kStageRenderTokenize = Label("stage", "render_tokenize");
const std::string kStageHashMatch = Label("stage", "hash_match");
const std::string kStageTotal = Label("stage", "total");

// `endpoint="...",status="..."`, cached for the statuses the router answers with.
const std::string& RequestLabels(ApiKind kind, int status) {
  static constexpr int kStatuses[] = {200, 400, 404, 405, 413, 499, 500, 502, 503, 504};
  static const auto* table = [] {
    auto* t = new std::vector<std::string>;
    for (ApiKind k : {ApiKind::kChat, ApiKind::kCompletions, ApiKind::kMessages}) {
      for (int st : kStatuses) {
        t->push_back(Label("endpoint", ApiKindName(k)) + "," + Label("status", std::to_string(st)));
      }
    }
    return t;
  }();
  constexpr size_t kCount = std::size(kStatuses);
  for (size_t i = 0; i < kCount; ++i) {
    if (kStatuses[i] == status) return (*table)[static_cast<size_t>(kind) * kCount + i];
  }
  thread_local std::string other;
  other = Label("endpoint", ApiKindName(kind)) + "," + Label("status", std::to_string(status));
  return other;
}

// The outcomes of infera_request_duration_seconds.
constexpr const char* kOutcomes[] = {"success", "client_error",   "cancelled",
                                     "timeout", "upstream_error", "no_worker"};

// Request ids: 24 lowercase hex digits.
void AppendHex(std::string& out, uint64_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i) out.push_back(kHex[(v >> (4 * i)) & 0xf]);
}

// "tcp://host:5557" with the port moved by `offset` (DP rank r publishes on P + r).
std::string OffsetPort(const std::string& endpoint, uint32_t offset) {
  if (offset == 0 || endpoint.empty()) return endpoint;
  size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return endpoint;
  int port = std::atoi(endpoint.c_str() + colon + 1);
  if (port <= 0) return endpoint;
  return endpoint.substr(0, colon + 1) + std::to_string(port + static_cast<int>(offset));
}

std::string OpenAiErrorBody(int status, std::string_view message, const char* code) {
  const char* type = status == 404   ? "not_found_error"
                     : status >= 500 ? (status == 503 ? "service_unavailable" : "server_error")
                                     : "invalid_request_error";
  json j = {{"error", {{"message", message}, {"type", type}, {"code", nullptr}}}};
  if (code != nullptr) {
    j["error"]["code"] = code;
  } else {
    j["error"]["code"] = status;
  }
  return j.dump();
}

// An upstream's error message for wrapping in another API's shape.
std::string UpstreamMessage(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
    if (e.is_string()) return e.get<std::string>();
  }
  if (j.is_object() && j.contains("message") && j["message"].is_string()) {
    return j["message"].get<std::string>();
  }
  return body.substr(0, 500);
}

}  // namespace

struct Router::Worker {
  discovery::WorkerRecord record;
  http::Endpoint endpoint;
  std::vector<core::TargetId> targets;  // one per dp rank, in rank order
  CircuitBreaker breaker;
  // The picks counter per role and rank (`role="...",worker_id="..."`).
  std::vector<std::atomic<uint64_t>*> picks[3];
};

// Owns a pick's active-blocks guard; releases it (under the pick mutex) exactly once.
class Router::HeldPick {
 public:
  HeldPick(Router* router, core::LoadState::ActiveGuard guard)
      : router_(router), guard_(std::move(guard)) {}
  HeldPick(const HeldPick&) = delete;
  HeldPick& operator=(const HeldPick&) = delete;
  ~HeldPick() { Release(); }
  void Release() {
    if (!guard_.pending()) return;
    std::lock_guard<std::mutex> lock(router_->pick_mu_);
    guard_.Release();
  }

 private:
  Router* router_;
  core::LoadState::ActiveGuard guard_;
};

Router::Router(RouterOptions options) : options_(std::move(options)) {
  int threads = options_.threads > 0 ? options_.threads : http::IoPool::HardwareThreads();
  pool_ = std::make_unique<http::IoPool>(threads);
  events::IngestorOptions iopt;
  ingestor_ = std::make_unique<events::KvEventIngestor>(iopt);
  const core::KvIndex& index = *ingestor_->WithIndex([](const core::KvIndex& i) { return &i; });
  selector_ = std::make_unique<core::Selector>(options_.policy, index);
  for (const char* outcome : kOutcomes) {
    duration_by_outcome_.push_back(
        request_duration_.Series(Label("router", core::PolicyName(options_.policy.policy)) + "," +
                                 Label("outcome", outcome)));
  }
  stage_parse_ = overhead_.Series(kStageParse);
  stage_render_tokenize_ = overhead_.Series(kStageRenderTokenize);
  stage_hash_match_ = overhead_.Series(kStageHashMatch);
  stage_total_ = overhead_.Series(kStageTotal);
  for (int role = 0; role < 3; ++role) {
    pick_cache_hits_by_role_[role] = pick_cache_hits_.Series(RoleLabel(core::Role(role)));
    pick_request_blocks_by_role_[role] = pick_request_blocks_.Series(RoleLabel(core::Role(role)));
  }
  std::random_device rd;
  request_id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  for (int i = 0; i < pool_->size(); ++i) {
    clients_.push_back(std::make_unique<http::Client>(pool_->executor(i)));
  }
}

Router::~Router() {
  if (started_) Shutdown();
  pool_->Stop();
}

int64_t Router::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

absl::Status Router::Start() {
  if (!options_.tokenizer_path.empty()) {
    auto tok = tokenizer::Tokenizer::Load(options_.tokenizer_path);
    if (!tok.ok()) return tok.status();
    tokenizer_ = std::move(*tok);
    encoder_ = std::make_unique<tokenizer::PrefixCachingEncoder>(*tokenizer_, 1024);
    auto tmpl = chat::ChatTemplate::Load(options_.tokenizer_path);
    if (tmpl.ok()) {
      template_ = std::make_unique<chat::ChatTemplate>(std::move(*tmpl));
    } else {
      spdlog::warn("no chat template in {}: {}; chat requests use the estimate",
                   options_.tokenizer_path, tmpl.status().ToString());
    }
  }
  http::ServerOptions sopt = options_.server;
  sopt.error_body = [](int status, std::string_view message, std::string_view target) {
    if (target.substr(0, 12) == "/v1/messages") {
      return http::ErrorBody{"application/json", AnthropicErrorBody(status, message)};
    }
    return http::ErrorBody{"application/json", OpenAiErrorBody(status, message, nullptr)};
  };
  server_ = std::make_unique<http::Server>(
      *pool_, sopt, [this](http::Request& r, http::ResponseWriter& w) { return Handle(r, w); });
  if (absl::Status s = server_->Listen(); !s.ok()) return s;
  server_->Start();
  pool_->Start();
  started_ = true;
  return absl::OkStatus();
}

uint16_t Router::port() const { return server_ ? server_->port() : 0; }

void Router::Shutdown() {
  if (!started_) return;
  started_ = false;
  server_->Shutdown();
  pool_->Stop();
}

void Router::AddWorker(const discovery::WorkerRecord& record) {
  auto ep = http::ParseHttpUrl(record.url);
  if (!ep.ok()) {
    spdlog::error("worker {}: unusable url: {}", record.worker_id, ep.status().ToString());
    return;
  }
  std::lock_guard<std::mutex> lock(pick_mu_);
  for (const auto& w : workers_) {
    if (w->record.worker_id == record.worker_id) return;  // UpdateWorker handles changes
  }
  auto w = std::make_unique<Worker>(
      Worker{record,
             *ep,
             {},
             CircuitBreaker(options_.breaker_failures, options_.breaker_cooldown_ms),
             {}});
  for (uint32_t r = 0; r < std::max<uint32_t>(1, record.dp_size); ++r) {
    events::IngestTarget t;
    t.key = {record.worker_id, record.dp_rank + r};
    if (options_.kv_events) {
      t.events_endpoint = OffsetPort(record.kv_events_endpoint, record.dp_rank + r);
      t.replay_endpoint = OffsetPort(record.kv_replay_endpoint, record.dp_rank + r);
    }
    t.block_size = record.kv_block_size == 0 ? 16 : record.kv_block_size;
    t.topic = options_.kv_events_topic;
    w->targets.push_back(ingestor_->AddTarget(t));
    for (int role = 0; role < 3; ++role) {
      w->picks[role].push_back(picks_total_.Series(RoleLabel(core::Role(role)) + "," +
                                                   Label("worker_id", t.key.ToString())));
    }
  }
  spdlog::info("worker added: {} url={} model={} mode={} ranks={}", record.worker_id, record.url,
               record.model_name, core::RoleName(static_cast<core::Role>(record.disagg_mode)),
               w->targets.size());
  workers_.push_back(std::move(w));
}

void Router::RemoveWorker(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(pick_mu_);
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i]->record.worker_id != worker_id) continue;
    for (size_t r = 0; r < workers_[i]->targets.size(); ++r) {
      selector_->RemoveTarget(workers_[i]->targets[r]);
      ingestor_->RemoveTarget({worker_id, workers_[i]->record.dp_rank + static_cast<uint32_t>(r)});
    }
    workers_.erase(workers_.begin() + static_cast<ptrdiff_t>(i));
    spdlog::info("worker removed: {}", worker_id);
    return;
  }
}

void Router::UpdateWorker(const discovery::WorkerRecord& record) {
  RemoveWorker(record.worker_id);
  AddWorker(record);
}

discovery::DiscoveryCallbacks Router::Callbacks() {
  discovery::DiscoveryCallbacks cb;
  cb.on_added = [this](const discovery::WorkerRecord& r) { AddWorker(r); };
  cb.on_updated = [this](const discovery::WorkerRecord& r) { UpdateWorker(r); };
  cb.on_removed = [this](const std::string& id) { RemoveWorker(id); };
  return cb;
}

size_t Router::PendingGuards() {
  std::lock_guard<std::mutex> lock(pick_mu_);
  return selector_->load().PendingGuards();
}

const std::string& Router::RoleLabel(core::Role role) {
  static const std::string labels[3] = {Label("role", core::RoleName(core::Role(0))),
                                        Label("role", core::RoleName(core::Role(1))),
                                        Label("role", core::RoleName(core::Role(2)))};
  return labels[static_cast<size_t>(role) % 3];
}

Histogram* Router::DurationSeries(const std::string& outcome) {
  for (size_t i = 0; i < std::size(kOutcomes); ++i) {
    if (outcome == kOutcomes[i]) return duration_by_outcome_[i];
  }
  return request_duration_.Series(Label("router", core::PolicyName(options_.policy.policy)) + "," +
                                  Label("outcome", outcome));
}

std::string Router::NewRequestId() {
  uint64_t n = request_seq_.fetch_add(1) + 1;
  uint64_t x = (n * 0x9e3779b97f4a7c15ULL) ^ request_id_salt_;
  std::string id;
  id.reserve(24);
  AppendHex(id, x, 16);
  AppendHex(id, n & 0xffffffff, 8);
  return id;
}

http::Awaitable<void> Router::SendJson(http::ResponseWriter& w, int status, const std::string& body,
                                       const std::string& request_id) {
  http::Headers h;
  h.Add("Content-Type", "application/json");
  if (!request_id.empty()) h.Add("X-Infera-Request-Id", request_id);
  co_await w.Send(status, std::move(h), body);
}

http::Awaitable<void> Router::SendError(http::ResponseWriter& w, int kind, int status,
                                        std::string message, const std::string& request_id,
                                        const char* code) {
  std::string body = static_cast<ApiKind>(kind) == ApiKind::kMessages
                         ? AnthropicErrorBody(status, message)
                         : OpenAiErrorBody(status, message, code);
  co_await SendJson(w, status, body, request_id);
}

std::string Router::HealthJson() {
  std::lock_guard<std::mutex> lock(pick_mu_);
  return json({{"status", "ok"}, {"active_workers", workers_.size()}}).dump();
}

std::string Router::ModelsJson() {
  std::lock_guard<std::mutex> lock(pick_mu_);
  json data = json::array();
  std::vector<std::string> seen;
  for (const auto& w : workers_) {
    const std::string& m = w->record.model_name;
    if (m.empty() || std::find(seen.begin(), seen.end(), m) != seen.end()) continue;
    seen.push_back(m);
    data.push_back({{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "infera"}});
  }
  return json({{"object", "list"}, {"data", data}}).dump();
}

std::string Router::WorkersJson() {
  std::lock_guard<std::mutex> lock(pick_mu_);
  json list = json::array();
  static constexpr const char* kBreaker[] = {"closed", "open", "half_open"};
  for (const auto& w : workers_) {
    json j = discovery::WorkerRecordToJson(w->record);
    j["breaker_state"] = kBreaker[static_cast<int>(w->breaker.state())];
    json ranks = json::array();
    for (size_t r = 0; r < w->targets.size(); ++r) {
      ranks.push_back({{"dp_rank", w->record.dp_rank + r},
                       {"active_blocks", selector_->load().ActiveBlocks(w->targets[r])}});
    }
    j["targets"] = ranks;
    list.push_back(std::move(j));
  }
  return json({{"workers", list}}).dump();
}

std::optional<std::string> Router::CacheViewJson(const std::string& worker_id, uint32_t dp_rank) {
  auto id = ingestor_->FindTarget({worker_id, dp_rank});
  if (!id) return std::nullopt;
  size_t blocks = ingestor_->WithIndex([&](const core::KvIndex& index) -> size_t {
    auto live = index.FindTarget({worker_id, dp_rank});
    return live ? index.BlockCount(*live) : 0;
  });
  return json({{"worker_id", worker_id}, {"dp_rank", dp_rank}, {"block_count", blocks}}).dump();
}

std::string Router::RenderMetrics() {
  std::string out;
  requests_total_.Render(out);
  picks_total_.Render(out);
  failovers_total_.Render(out);
  upstream_errors_total_.Render(out);
  pick_cache_hits_.Render(out);
  pick_request_blocks_.Render(out);
  request_duration_.Render(out);
  overhead_.Render(out);
  RenderHeader(out, "infera_request_inflight", "gauge", "Requests being served.");
  out += "infera_request_inflight{" + Label("router", core::PolicyName(options_.policy.policy)) +
         "} " + std::to_string(inflight_.load()) + "\n";
  {
    std::lock_guard<std::mutex> lock(pick_mu_);
    size_t by_mode[3] = {0, 0, 0};
    for (const auto& w : workers_) by_mode[static_cast<int>(w->record.disagg_mode) % 3]++;
    RenderHeader(out, "infera_active_workers", "gauge", "Workers known to discovery.");
    for (int m = 0; m < 3; ++m) {
      out += "infera_active_workers{" + Label("disagg_mode", core::RoleName(core::Role(m))) + "} " +
             std::to_string(by_mode[m]) + "\n";
    }
    RenderHeader(out, "infera_policy_active_blocks", "gauge",
                 "Distinct in-flight prompt blocks per target.");
    for (const auto& w : workers_) {
      for (size_t r = 0; r < w->targets.size(); ++r) {
        core::TargetKey key{w->record.worker_id, w->record.dp_rank + static_cast<uint32_t>(r)};
        out += "infera_policy_active_blocks{" + Label("worker_id", key.ToString()) + "} " +
               std::to_string(selector_->load().ActiveBlocks(w->targets[r])) + "\n";
      }
    }
    RenderHeader(out, "infera_policy_cache_view_size", "gauge",
                 "Blocks the router believes each target caches.");
    ingestor_->WithIndex([&](const core::KvIndex& index) {
      for (const auto& w : workers_) {
        for (size_t r = 0; r < w->targets.size(); ++r) {
          core::TargetKey key{w->record.worker_id, w->record.dp_rank + static_cast<uint32_t>(r)};
          auto id = index.FindTarget(key);
          out += "infera_policy_cache_view_size{" + Label("worker_id", key.ToString()) + "} " +
                 std::to_string(id ? index.BlockCount(*id) : 0) + "\n";
        }
      }
      return 0;
    });
    RenderHeader(out, "infera_router_worker_breaker_state", "gauge",
                 "Circuit breaker per worker: 0 closed, 1 open, 2 half-open.");
    for (const auto& w : workers_) {
      out += "infera_router_worker_breaker_state{" + Label("worker_id", w->record.worker_id) +
             "} " + std::to_string(static_cast<int>(w->breaker.state())) + "\n";
    }
    RenderHeader(out, "infera_router_pending_pick_guards", "gauge",
                 "Picks whose active blocks are not yet released.");
    out += "infera_router_pending_pick_guards " +
           std::to_string(selector_->load().PendingGuards()) + "\n";
  }
  const events::KvEventCounters& c = ingestor_->counters();
  auto counter = [&](const char* name, const char* help, const std::atomic<uint64_t>& v) {
    RenderHeader(out, name, "counter", help);
    out += std::string(name) + " " + std::to_string(v.load()) + "\n";
  };
  counter("infera_kv_events_messages_total", "Live KV-event messages received.", c.messages);
  counter("infera_kv_events_batches_total", "KV-event batches applied.", c.batches);
  counter("infera_kv_events_events_total", "KV events applied.", c.events);
  counter("infera_kv_events_blocks_stored_total", "Engine blocks stored.", c.blocks_stored);
  counter("infera_kv_events_blocks_removed_total", "Blocks removed.", c.blocks_removed);
  counter("infera_kv_events_gaps_total", "Sequence gaps seen.", c.gaps);
  counter("infera_kv_events_replays_total", "Replay requests sent.", c.replays);
  counter("infera_kv_events_resyncs_total", "Target views cleared and rebuilt.", c.resyncs);
  counter("infera_kv_events_restarts_total", "Publisher restarts detected.", c.restarts);
  counter("infera_kv_events_decode_errors_total", "Undecodable payloads.", c.decode_errors);
  counter("infera_kv_events_unknown_parents_total", "BlockStored with unknown parent.",
          c.unknown_parents);
  return out;
}

http::Awaitable<void> Router::Handle(http::Request& req, http::ResponseWriter& w) {
  std::string_view path = req.path();
  std::string request_id(req.headers.Get("X-Infera-Request-Id"));
  if (request_id.empty() || request_id.size() > 128) request_id = NewRequestId();
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (req.method == "POST" && path == "/v1/chat/completions") {
    co_await Proxy(static_cast<int>(ApiKind::kChat), req, w, std::move(request_id));
  } else if (req.method == "POST" && path == "/v1/completions") {
    co_await Proxy(static_cast<int>(ApiKind::kCompletions), req, w, std::move(request_id));
  } else if (req.method == "POST" && path == "/v1/messages") {
    co_await Proxy(static_cast<int>(ApiKind::kMessages), req, w, std::move(request_id));
  } else if (get && path == "/health") {
    co_await SendJson(w, 200, HealthJson(), request_id);
  } else if (get && path == "/v1/models") {
    co_await SendJson(w, 200, ModelsJson(), request_id);
  } else if (get && path == "/v1/workers") {
    co_await SendJson(w, 200, WorkersJson(), request_id);
  } else if (get && path == "/metrics") {
    http::Headers h;
    h.Add("Content-Type", "text/plain; version=0.0.4");
    co_await w.Send(200, std::move(h), RenderMetrics());
  } else if (get && path.substr(0, 21) == "/v1/admin/cache-view/") {
    std::string worker_id(path.substr(21));
    std::string rank_text = req.QueryParam("dp_rank");
    uint32_t rank = 0;
    bool rank_ok = true;
    if (!rank_text.empty()) {
      char* end = nullptr;
      unsigned long v = std::strtoul(rank_text.c_str(), &end, 10);
      rank_ok = end != nullptr && *end == '\0' && v <= 0xffffffffUL;
      rank = static_cast<uint32_t>(v);
    }
    if (!rank_ok) {
      co_await SendError(w, 0, 400, "dp_rank must be a non-negative integer", request_id);
    } else if (auto view = CacheViewJson(worker_id, rank)) {
      co_await SendJson(w, 200, *view, request_id);
    } else {
      co_await SendError(
          w, 0, 404, "unknown worker '" + worker_id + "' rank " + std::to_string(rank), request_id);
    }
  } else {
    int kind = path == "/v1/messages" ? static_cast<int>(ApiKind::kMessages) : 0;
    bool known = path == "/v1/chat/completions" || path == "/v1/completions" ||
                 path == "/v1/messages" || path == "/health" || path == "/v1/models" ||
                 path == "/v1/workers" || path == "/metrics";
    if (known) {
      co_await SendError(w, kind, 405,
                         "method " + req.method + " not allowed on " + std::string(path),
                         request_id);
    } else {
      co_await SendError(w, kind, 404, "no route for " + req.method + " " + std::string(path),
                         request_id);
    }
  }
}

http::Awaitable<void> Router::Proxy(int kind_int, http::Request& req, http::ResponseWriter& w,
                                    std::string request_id) {
  const ApiKind kind = static_cast<ApiKind>(kind_int);
  const auto start = Clock::now();
  inflight_.fetch_add(1);
  std::string outcome = "success";
  int final_status = 200;
  auto finish = [&] {
    inflight_.fetch_sub(1);
    requests_total_.Add(RequestLabels(kind, final_status));
    DurationSeries(outcome)->Observe(SecondsSince(start));
  };

  // One parse serves validation and the chat template: `dom` lives in this thread's
  // parser and is used below before the first suspension point.
  std::optional<simdjson::dom::element> dom;
  auto parsed = ParseApiRequest(kind, req.body, &dom);
  const double parse_s = SecondsSince(start);
  if (!parsed.ok()) {
    final_status = 400;
    outcome = "client_error";
    co_await SendError(w, kind_int, 400, std::string(parsed.status().message()), request_id);
    finish();
    co_return;
  }
  ApiRequest& api = *parsed;

  // What goes upstream, and the text the router tokenizes.
  std::string upstream_body;
  std::string upstream_path =
      kind == ApiKind::kCompletions ? "/v1/completions" : "/v1/chat/completions";
  json chat_body;
  if (kind == ApiKind::kMessages) {
    chat_body = AnthropicToChat(api.body);
    upstream_body = chat_body.dump();
  } else {
    upstream_body = std::move(req.body);
  }

  // Token ids: the client's, or render + tokenize, or none (estimate).
  const auto tok_start = Clock::now();
  std::optional<std::vector<core::TokenId>> tokens = std::move(api.prompt_tokens);
  if (!tokens && encoder_) {
    if (kind == ApiKind::kCompletions && !api.prompt_text.empty()) {
      tokens = tokenizer_->Encode(api.prompt_text, true);
    } else if (kind != ApiKind::kCompletions && template_ && api.image_keys.empty()) {
      // Render from the exact body the worker receives (object key order reaches the
      // prompt through tojson): the parse above for chat, the translation for messages.
      auto rendered = kind == ApiKind::kChat && dom ? template_->RenderDom(*dom)
                                                    : template_->RenderJson(upstream_body);
      if (rendered.ok()) {
        tokens = encoder_->Encode(*rendered);
      } else {
        spdlog::debug("request {}: render failed ({}); using the estimate", request_id,
                      rendered.status().ToString());
      }
    }
  }
  const double tokenize_s = SecondsSince(tok_start);

  auto cancel = std::make_shared<http::Cancellation>();
  w.OnClientGone([cancel] { cancel->Cancel(); });
  http::Client& client = *clients_[static_cast<size_t>(std::max(0, http::IoPool::CurrentIndex()))];
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.request_timeout_ms);

  std::vector<std::string> tried;
  int last_status = 503;
  std::string last_message = "no worker available";
  const char* last_code = nullptr;
  bool any_worker = false;
  bool model_known = false;

  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    // --- pick (short critical section) ---
    std::unique_ptr<HeldPick> held;
    http::Endpoint endpoint;
    std::string worker_id;
    std::optional<uint32_t> dp_rank;
    {
      const auto pick_start = Clock::now();
      std::lock_guard<std::mutex> lock(pick_mu_);
      std::vector<core::TargetId> candidates;
      std::vector<Worker*> owners;
      const int64_t now = NowNs();
      for (const auto& wk : workers_) {
        any_worker = true;
        if (!wk->record.model_name.empty() && wk->record.model_name != api.model) continue;
        if (wk->record.disagg_mode == discovery::DisaggMode::kDecode) continue;
        model_known = true;
        if (std::find(tried.begin(), tried.end(), wk->record.worker_id) != tried.end()) continue;
        if (!wk->breaker.WouldAllow(now)) continue;
        for (core::TargetId t : wk->targets) {
          candidates.push_back(t);
          owners.push_back(wk.get());
        }
      }
      if (candidates.empty()) break;
      core::RoutingInput input;
      input.role = core::Role::kMixed;
      input.request_id = request_id;
      if (tokens) input.tokens = std::span<const core::TokenId>(*tokens);
      input.estimated_tokens = api.estimated_tokens;
      input.image_keys = api.image_keys;
      auto pick = ingestor_->WithIndex(
          [&](const core::KvIndex&) { return selector_->Pick(input, candidates); });
      if (!pick.ok()) {
        last_status = 503;
        last_message = std::string(pick.status().message());
        break;
      }
      size_t idx = static_cast<size_t>(
          std::find(candidates.begin(), candidates.end(), pick->picked) - candidates.begin());
      Worker* owner = owners[idx];
      owner->breaker.Allow(now);
      endpoint = owner->endpoint;
      worker_id = owner->record.worker_id;
      if (owner->record.dp_size > 1) {
        dp_rank = owner->record.dp_rank +
                  static_cast<uint32_t>(
                      std::find(owner->targets.begin(), owner->targets.end(), pick->picked) -
                      owner->targets.begin());
      }
      tried.push_back(worker_id);
      if (spdlog::should_log(spdlog::level::info)) spdlog::info("{}", core::FormatPickLog(*pick));
      const size_t role = static_cast<size_t>(pick->role) % 3;
      owner
          ->picks[role][static_cast<size_t>(
              std::find(owner->targets.begin(), owner->targets.end(), pick->picked) -
              owner->targets.begin())]
          ->fetch_add(1, std::memory_order_relaxed);
      pick_cache_hits_by_role_[role]->Observe(pick->cache_hits);
      pick_request_blocks_by_role_[role]->Observe(pick->request_blocks);
      held = std::make_unique<HeldPick>(this, std::move(pick->guard));
      if (attempt == 0) {
        const auto now_tp = Clock::now();
        stage_parse_->Observe(parse_s);
        stage_render_tokenize_->Observe(tokenize_s);
        stage_hash_match_->Observe(std::chrono::duration<double>(now_tp - pick_start).count());
        stage_total_->Observe(std::chrono::duration<double>(now_tp - start).count());
      }
    }
    if (attempt > 0) failovers_total_.Add(Label("worker_id", worker_id));

    // --- send ---
    http::Headers up;
    up.Add("Content-Type", "application/json");
    up.Add("X-Infera-Request-Id", request_id);
    if (auto auth = req.headers.Get("Authorization"); !auth.empty()) {
      up.Add("Authorization", std::string(auth));
    }
    std::string body = upstream_body;
    if (dp_rank) {
      json j = json::parse(body, nullptr, false);
      if (j.is_object()) {
        j["data_parallel_rank"] = *dp_rank;
        body = j.dump();
      }
    }
    auto sent = co_await client.Send(endpoint, "POST", upstream_path, up, std::move(body), deadline,
                                     cancel);
    auto report = [&](bool ok, const char* kind_label) {
      std::lock_guard<std::mutex> lock(pick_mu_);
      for (auto& wk : workers_) {
        if (wk->record.worker_id != worker_id) continue;
        if (ok) {
          wk->breaker.OnSuccess();
        } else if (kind_label == nullptr) {
          wk->breaker.OnAbandoned();
        } else {
          wk->breaker.OnFailure(NowNs());
        }
      }
      if (!ok && kind_label != nullptr) {
        upstream_errors_total_.Add(Label("worker_id", worker_id) + "," + Label("kind", kind_label));
      }
    };
    if (!sent.ok()) {
      absl::StatusCode code = sent.status().code();
      if (code == absl::StatusCode::kCancelled || w.client_gone()) {
        report(false, nullptr);
        outcome = "cancelled";
        final_status = 499;
        finish();
        co_return;
      }
      if (code == absl::StatusCode::kDeadlineExceeded) {
        report(false, "timeout");
        final_status = 504;
        outcome = "timeout";
        co_await SendError(w, kind_int, 504,
                           "worker " + worker_id + " did not answer within " +
                               std::to_string(options_.request_timeout_ms) + " ms",
                           request_id);
        finish();
        co_return;
      }
      report(false, "unreachable");
      last_status = 502;
      last_message = "worker " + worker_id + " failed: " + std::string(sent.status().message());
      spdlog::warn("request {}: {}", request_id, last_message);
      continue;  // failover: nothing reached the client yet
    }
    std::unique_ptr<http::ClientStream> stream = std::move(*sent);
    const int status = stream->status();
    if (status >= 500) {
      auto body_or = co_await stream->ReadAll(1 << 20);
      report(false, "status_5xx");
      last_status = 502;
      last_message = "worker " + worker_id + " answered " + std::to_string(status) +
                     (body_or.ok() ? ": " + UpstreamMessage(*body_or) : std::string());
      spdlog::warn("request {}: {}", request_id, last_message);
      continue;
    }
    report(true, "");

    http::Headers out;
    out.Add("X-Infera-Request-Id", request_id);
    out.Add("X-Infera-Worker-Id", worker_id);
    const std::string content_type(stream->headers().Get("Content-Type"));
    const bool sse = content_type.rfind("text/event-stream", 0) == 0;
    final_status = status;
    if (status != 200 || !sse) {
      auto body_or = co_await stream->ReadAll(1ull << 30);
      if (!body_or.ok()) {
        if (w.client_gone() || body_or.status().code() == absl::StatusCode::kCancelled) {
          outcome = "cancelled";
          final_status = 499;
        } else {
          bool timeout = body_or.status().code() == absl::StatusCode::kDeadlineExceeded;
          final_status = timeout ? 504 : 502;
          outcome = timeout ? "timeout" : "upstream_error";
          co_await SendError(w, kind_int, final_status,
                             "worker " + worker_id +
                                 " failed mid-response: " + std::string(body_or.status().message()),
                             request_id);
        }
        finish();
        co_return;
      }
      std::string body = std::move(*body_or);
      if (kind == ApiKind::kMessages) {
        if (status == 200) {
          json chat = json::parse(body, nullptr, false);
          body = ChatResponseToAnthropic(chat.is_discarded() ? json::object() : chat, api.model,
                                         request_id)
                     .dump();
        } else {
          body = AnthropicErrorBody(status, UpstreamMessage(body));
        }
        out.Add("Content-Type", "application/json");
      } else {
        out.Add("Content-Type", content_type.empty() ? "application/json" : content_type);
      }
      if (status >= 400) outcome = "client_error";
      co_await w.Send(status, std::move(out), std::move(body));
      if (w.client_gone()) outcome = "cancelled";
      finish();
      co_return;
    }

    // --- streaming relay: chunk by chunk, nothing buffered ---
    out.Add("Content-Type", "text/event-stream");
    out.Add("Cache-Control", "no-cache");
    std::optional<AnthropicStreamTranslator> translator;
    if (kind == ApiKind::kMessages) translator.emplace(api.model, request_id);
    if (!co_await w.BeginStream(200, std::move(out))) {
      stream->Cancel();
      outcome = "cancelled";
      final_status = 499;
      finish();
      co_return;
    }
    while (true) {
      auto piece = co_await stream->Read();
      if (!piece.ok()) {
        if (w.client_gone() || piece.status().code() == absl::StatusCode::kCancelled) {
          outcome = "cancelled";
          final_status = 499;
          break;
        }
        // After the first byte: report in-band, then end the stream.
        outcome = "upstream_error";
        std::string msg =
            "worker " + worker_id + " failed mid-stream: " + std::string(piece.status().message());
        std::string event = translator
                                ? "event: error\ndata: " + AnthropicErrorBody(502, msg) + "\n\n"
                                : "data: " + OpenAiErrorBody(502, msg, nullptr) + "\n\n";
        co_await w.WriteChunk(event);
        co_await w.EndStream();
        break;
      }
      if (!piece->has_value()) {
        if (translator) co_await w.WriteChunk(translator->Finish());
        co_await w.EndStream();
        break;
      }
      bool ok = translator ? co_await w.WriteChunk(translator->Feed(**piece))
                           : co_await w.WriteChunk(**piece);
      if (!ok) {
        stream->Cancel();  // the client is gone: abort the generation upstream
        outcome = "cancelled";
        final_status = 499;
        break;
      }
    }
    finish();
    co_return;
  }

  // No worker answered before the first byte.
  if (!any_worker) {
    last_status = 503;
    last_message = "no workers available";
  } else if (!model_known) {
    last_status = 404;
    last_message = "the model '" + api.model + "' does not exist";
    last_code = "model_not_found";
  } else if (tried.empty()) {
    last_status = 503;
    last_message = "no worker available for model '" + api.model + "' (all circuit breakers open)";
  }
  final_status = last_status;
  outcome = last_status == 404 ? "client_error" : "no_worker";
  if (last_status == 502) outcome = "upstream_error";
  co_await SendError(w, kind_int, last_status, last_message, request_id, last_code);
  finish();
}

}  // namespace infera::router
