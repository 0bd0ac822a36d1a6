// Router: the infera-router server (architecture §1, §2, §6, §7, §12, §13).
//
// HTTP front (src/http) -> parse (ApiRequest) -> RoutingInput (token ids from the
// chat template + tokenizer when --router-tokenizer-path is set, the client's
// integer-array prompt, else the bytes/4 estimate) -> core::Selector pick under one
// short mutex, reading the KV index that the events ingestor owns -> proxy to the
// worker over the per-loop keep-alive pool, streaming chunk by chunk -> release the
// pick's active-blocks guard exactly once (completion, failure, client disconnect —
// which also cancels the upstream request).
//
// Failure handling: per-request deadline; failover to another candidate only before
// the first byte reached the client (connect failure, 5xx answer); per-worker
// circuit breaker; errors in the API's own shape (OpenAI or Anthropic) with 400 /
// 404 / 413 / 502 / 503 / 504 (doc/router.md).
//
// Workers come and go through AddWorker/UpdateWorker/RemoveWorker (discovery
// callbacks, any thread); a removed worker's index and load state go with it.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/selector.h"
#include "discovery/discovery.h"
#include "discovery/worker_record.h"
#include "events/kv_event_ingestor.h"
#include "http/client.h"
#include "http/server.h"
#include "router/metrics.h"

namespace infera::tokenizer {
class Tokenizer;
class PrefixCachingEncoder;
}  // namespace infera::tokenizer
namespace infera::chat {
class ChatTemplate;
}

namespace infera::router {

struct RouterOptions {
  http::ServerOptions server;  // host, port, limits
  int threads = 0;             // 0: all hardware threads
  core::PolicyConfig policy;
  std::string tokenizer_path;  // --router-tokenizer-path ("" = estimate)
  bool kv_events = true;       // --kv-event-transport zmq (false: none)
  std::string kv_events_topic;
  int64_t request_timeout_ms = 600'000;
  int max_attempts = 3;  // workers tried before the first byte
  uint32_t breaker_failures = 5;
  int64_t breaker_cooldown_ms = 10'000;
};

class Router {
 public:
  explicit Router(RouterOptions options);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Loads the tokenizer/template (when configured), binds and starts serving.
  absl::Status Start();
  uint16_t port() const;
  // Graceful: stop accepting, drain in-flight requests and streams, stop threads.
  void Shutdown();

  void AddWorker(const discovery::WorkerRecord& record);
  void UpdateWorker(const discovery::WorkerRecord& record);
  void RemoveWorker(const std::string& worker_id);
  discovery::DiscoveryCallbacks Callbacks();

  // Pick guards not yet released (tests: must return to 0).
  size_t PendingGuards();
  std::string RenderMetrics();

 private:
  struct Worker;
  struct Loop;
  class HeldPick;
  struct ProxyState;

  http::Awaitable<void> Handle(http::Request& req, http::ResponseWriter& w);
  http::Awaitable<void> Proxy(int kind, http::Request& req, http::ResponseWriter& w,
                              std::string request_id);
  static const std::string& RoleLabel(core::Role role);
  Histogram* DurationSeries(const std::string& outcome);
  http::Awaitable<void> SendJson(http::ResponseWriter& w, int status, const std::string& body,
                                 const std::string& request_id);
  http::Awaitable<void> SendError(http::ResponseWriter& w, int kind, int status,
                                  std::string message, const std::string& request_id,
                                  const char* code = nullptr);
  std::string HealthJson();
  std::string ModelsJson();
  std::string WorkersJson();
  std::optional<std::string> CacheViewJson(const std::string& worker_id, uint32_t dp_rank);
  std::string NewRequestId();
  int64_t NowNs() const;

  RouterOptions options_;
  std::unique_ptr<http::IoPool> pool_;
  std::unique_ptr<http::Server> server_;
  std::vector<std::unique_ptr<http::Client>> clients_;  // one per loop
  std::unique_ptr<events::KvEventIngestor> ingestor_;

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::PrefixCachingEncoder> encoder_;
  std::unique_ptr<chat::ChatTemplate> template_;

  // pick_mu_ guards selector_, workers_ and every breaker; it is held for a pick,
  // a guard release, or a worker change, never across I/O.
  std::mutex pick_mu_;
  std::unique_ptr<core::Selector> selector_;
  std::vector<std::unique_ptr<Worker>> workers_;

  std::atomic<uint64_t> request_seq_{0};
  uint64_t request_id_salt_ = 0;
  std::atomic<int64_t> inflight_{0};
  bool started_ = false;

  CounterFamily requests_total_{"infera_router_requests_total",
                                "Requests answered, by endpoint and HTTP status."};
  CounterFamily picks_total_{"infera_router_picks_total", "Picks, by role and worker."};
  CounterFamily failovers_total_{"infera_router_failovers_total",
                                 "Retries on another worker before the first byte."};
  CounterFamily upstream_errors_total_{"infera_router_upstream_errors_total",
                                       "Upstream failures, by worker and kind."};
  HistogramFamily pick_cache_hits_{"infera_router_pick_cache_hits",
                                   "Cache-hit blocks of the picked target.",
                                   {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}};
  HistogramFamily pick_request_blocks_{"infera_router_pick_request_blocks",
                                       "Prompt blocks of picked requests.",
                                       {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}};
  HistogramFamily request_duration_{
      "infera_request_duration_seconds",
      "Request duration, by router policy and outcome.",
      {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  HistogramFamily overhead_{
      "infera_router_routing_overhead_seconds",
      "Router time before proxying, by stage (parse, render_tokenize, "
      "hash_match, total).",
      {1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.1}};

  // Series of the families above that every request touches, looked up once.
  std::vector<Histogram*> duration_by_outcome_;  // per outcome (kOutcomes in router.cc)
  Histogram* stage_parse_ = nullptr;
  Histogram* stage_render_tokenize_ = nullptr;
  Histogram* stage_hash_match_ = nullptr;
  Histogram* stage_total_ = nullptr;
  Histogram* pick_cache_hits_by_role_[3] = {};
  Histogram* pick_request_blocks_by_role_[3] = {};
};

}  // namespace infera::router
