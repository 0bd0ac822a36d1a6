// EngineRunner: runs the simulated engine (sim::Engine) in real time, one thread
// per data-parallel rank, and publishes its KV events over ZMQ (doc/sim.md,
// "infera-mock-engine").
//
// Each rank's thread loops: wait for work; Step() the engine under the rank's
// mutex; sleep the step's duration (the timing model, --speedup applied); then
// publish the step's KV events as one batch on the rank's EventPublisher (PUB on
// the configured port + rank, replay ROUTER on its port + rank; with port 0, rank 0
// gets an OS-picked port P and rank r binds P + r) and hand the step's tokens to
// the requests' callbacks. With dp_size > 1 each batch carries its rank.
//
// Fault injection (tests): drop a fraction of event batches from the live stream
// (they stay in the replay buffer, so a subscriber sees a gap it can repair),
// reorder a fraction (a batch is held back and sent after the next one), stall the
// engine once for `stall_ms` after `stall_after_requests` requests, publish token
// ids the router cannot match (`kv_events_hash_seed`).
//
// Thread-safety: every public method may be called from any thread. Output
// callbacks run on the rank's thread and must not call back into the runner.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine_events/publisher.h"
#include "sim/engine.h"

namespace infera::mock {

struct RunnerOptions {
  sim::EngineConfig engine;
  uint32_t dp_size = 1;
  std::string events_endpoint = "tcp://*:5557";  // rank r binds port + r
  std::string replay_endpoint;                   // empty: no replay socket
  std::string topic = "kv-events";
  events::WireShape shape = events::WireShape::kVllm;
  double drop_event_fraction = 0;
  double reorder_event_fraction = 0;
  // Fault: nonzero publishes every BlockStored's token ids XOR-masked by a value
  // derived from this seed, so the router's hashes of this engine's blocks never
  // match its requests' (what a hash seed the router does not share does to a router
  // that matches engine hashes; to Infera's, which re-hashes token ids, a tokenizer
  // or chat-template mismatch). The engine's own cache is unchanged.
  uint64_t kv_events_hash_seed = 0;
  // vLLM-shaped BlockStored events carry extra_keys (what vLLM sends today: the LoRA
  // name and a chain's cache_salt per block); false: omitted, as older vLLM (and
  // SGLang, always) do, so a salt is not visible on the wire.
  bool kv_events_extra_keys = true;
  uint64_t stall_after_requests = 0;  // 0: never
  int64_t stall_ms = 0;
  uint64_t seed = 1;
};

class EngineRunner {
 public:
  using OutputFn = std::function<void(const sim::TokenOutput&)>;

  static absl::StatusOr<std::unique_ptr<EngineRunner>> Create(const RunnerOptions& options);
  ~EngineRunner();  // stops the threads
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  uint32_t dp_size() const { return static_cast<uint32_t>(ranks_.size()); }
  // The rank with the fewest queued and running requests.
  uint32_t LeastLoadedRank() const;
  // Queues a request on `rank`; false when the engine refuses it (empty prompt,
  // too long for the cache). `on_output` gets every token, the last one with
  // finished = true. REQUIRES: rank < dp_size().
  // remote_prefill: a PD decode leg whose prompt KV arrived (sim::EngineRequest).
  // keys: the request's cache_salt and LoRA adapter (sim::CacheKeys).
  bool Submit(uint32_t rank, std::vector<core::TokenId> prompt, size_t max_tokens,
              OutputFn on_output, uint64_t* request_id, bool remote_prefill = false,
              sim::CacheKeys keys = {});
  // Prompt tokens rank `rank` would serve from its prefix cache now.
  size_t CachedPrefixTokens(uint32_t rank, std::span<const core::TokenId> prompt,
                            const sim::CacheKeys& keys = {}) const;
  // Drops a request (client gone); its callback is not called again.
  void Abort(uint32_t rank, uint64_t request_id);
  // Clears every rank's prefix cache (AllBlocksCleared); false while requests run.
  bool ResetPrefixCache();

  // {"dp_size": D, "block_size": bs, "ranks": [{"dp_rank": r, "block_count": n,
  //   "engine_hashes": [...], "router_hashes": [...]}]} (hashes as unsigned integers).
  nlohmann::json DebugDump() const;
  // Prometheus text (vllm:* gauges and counters, infera_mock_* counters).
  std::string MetricsText(const std::string& model_name) const;
  // Bound event endpoints of each rank (tcp://host:port).
  std::vector<std::string> EventEndpoints() const;
  std::vector<std::string> ReplayEndpoints() const;

 private:
  struct Rank;
  explicit EngineRunner(const RunnerOptions& options);
  static absl::StatusOr<std::vector<std::unique_ptr<events::EventPublisher>>> RankPublishers(
      const RunnerOptions& options);
  void Loop(Rank* rank);
  void Publish(Rank* rank, const std::vector<sim::KvEvent>& events);

  RunnerOptions options_;
  const uint32_t token_mask_;  // from kv_events_hash_seed; 0: token ids as they are
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> submitted_{0};
  std::atomic<bool> stalled_once_{false};
};

}  // namespace infera::mock
