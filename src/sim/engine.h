// Engine: a vLLM-like simulated inference engine, pure and step-driven (doc/sim.md).
//
// Continuous batching with chunked prefill: each Step() schedules the running
// sequences first (one token each when decoding, the next prefill chunk otherwise,
// within `max_num_batched_tokens`), preempting the most recently admitted
// sequence (recompute mode: its blocks are released, it goes back to the head of
// the waiting queue) when the KV cache has no free block; then admits waiting
// sequences in FIFO order while `max_num_seqs`, the token budget and free blocks
// allow. Admission looks up the longest cached prefix (in full blocks, capped so at
// least one prompt token is computed, as vLLM does) and reports it as the
// request's cached_tokens. Full blocks are cached as they fill (prompt and
// generated tokens), emitting BlockStored; evictions emit BlockRemoved; Reset()
// emits AllBlocksCleared.
//
// The engine has no clock: Step() returns how long the step takes according to
// the TimingModel, and the caller (the offline simulator in virtual time, the
// mock engine in real time) decides when its outputs become visible.
//
// Generated tokens are deterministic: GeneratedToken(request_id, index).
//
// Thread-safety: none; the owner serialises all calls.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/types.h"
#include "sim/kv_cache.h"
#include "sim/kv_event.h"
#include "sim/timing_model.h"

namespace infera::sim {

struct EngineConfig {
  size_t block_size = 16;
  size_t num_gpu_blocks = 8192;
  size_t max_num_seqs = 256;
  size_t max_num_batched_tokens = 8192;
  bool enable_prefix_caching = true;
  uint64_t hash_seed = 0x1f2e3d4c5b6a7988ULL;  // the engine's own hash seed
  uint32_t vocab_size = 32000;                 // for generated tokens
  // Also keep the router's hash (core::HashChunk chain) of every cached block, for
  // the mock engine's debug dump. Costs one more hash per block.
  bool track_router_hashes = false;
  TimingModel timing;
};

struct EngineRequest {
  uint64_t id = 0;  // unique among the engine's live requests
  std::vector<core::TokenId> prompt;
  size_t max_tokens = 1;  // output tokens to generate (>= 1)
  // The decode leg of a disaggregated request: at its first admission the prompt's KV
  // beyond the local prefix hit arrives from the prefill worker, so only the last
  // prompt token is run here, timed as a decode step (doc/pd.md). After a preemption
  // the prompt is recomputed locally.
  bool remote_prefill = false;
  // What vLLM puts in the block hashes besides the tokens: the cache_salt (first
  // block) and the LoRA adapter (every block). Requests with other keys never share
  // cached blocks, and their cached_tokens count only their own.
  CacheKeys keys{};
};

// One token produced by a step.
struct TokenOutput {
  uint64_t request_id = 0;
  core::TokenId token = 0;
  uint32_t index = 0;     // 0 for the first output token
  bool finished = false;  // the request's last token
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

struct StepResult {
  int64_t duration_ns = 0;
  size_t prefill_tokens = 0;
  size_t decode_seqs = 0;
  size_t preempted = 0;
  std::vector<TokenOutput> outputs;
};

struct EngineStats {
  uint64_t steps = 0;
  uint64_t preemptions = 0;
  uint64_t prompt_tokens = 0;  // of admitted requests (first admission)
  uint64_t cached_tokens = 0;
  uint64_t finished = 0;
};

class Engine {
 public:
  explicit Engine(const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineConfig& config() const { return config_; }

  // Queues a request. Returns false (and ignores it) when the prompt is empty,
  // max_tokens is 0, the id is live, or the prompt alone can never fit the cache.
  bool AddRequest(EngineRequest request);
  // Drops a live request (client gone); its blocks are released. False if unknown.
  bool Abort(uint64_t request_id);
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  size_t NumRunning() const { return running_.size(); }
  size_t NumWaiting() const { return waiting_.size(); }
  // A deep copy (its requests, its cache, its counters): a what-if that steps on its
  // own and leaves this engine untouched (the TTFT oracle, doc/sim.md). Events not
  // yet taken are copied too.
  std::unique_ptr<Engine> Clone() const;

  // Runs one scheduler iteration. REQUIRES: HasWork().
  StepResult Step();

  // Clears the prefix cache (AllBlocksCleared). Fails (false) while requests are
  // running, as vLLM's reset_prefix_cache does.
  bool ResetPrefixCache();

  // Prompt tokens the cache would serve for `prompt` now (no side effects).
  size_t CachedPrefixTokens(std::span<const core::TokenId> prompt,
                            const CacheKeys& keys = {}) const;
  // Engine hashes of the full blocks of `tokens`.
  std::vector<core::BlockHash> HashBlocks(std::span<const core::TokenId> tokens,
                                          const CacheKeys& keys = {}) const;

  const KvCache& cache() const { return cache_; }
  std::vector<KvEvent> TakeEvents() { return cache_.TakeEvents(); }
  const EngineStats& stats() const { return stats_; }

  static core::TokenId GeneratedToken(uint64_t request_id, uint32_t index, uint32_t vocab_size);

 private:
  struct Seq;
  // Clone's: this config with a copy of `cache` (not a fresh one to overwrite).
  Engine(const EngineConfig& config, const KvCache& cache);
  void Preempt(Seq* seq);
  void FinishSeq(Seq* seq);
  void CacheFullBlocks(Seq* seq);
  // Blocks to add so `seq` holds `tokens` tokens.
  size_t BlocksNeeded(const Seq& seq, size_t tokens) const;

  EngineConfig config_;
  KvCache cache_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Seq>> seqs_;
  std::vector<Seq*> running_;  // admission order
  std::deque<Seq*> waiting_;
  EngineStats stats_;
};

}  // namespace infera::sim
