// PrefixCacheBound: the best prefix hit rate any router could reach (doc/sim.md).
//
// One cache holding `capacity_blocks` router blocks (the pooled bound: N engines ×
// B blocks each, as if all their memory were one LRU cache), or unlimited
// (capacity 0: the infinite-cache bound). Requests are added in arrival order:
// each one hits the consecutive run of its chain, from block 0, that the cache
// holds (capped like the engine: at least one prompt token is computed), then all
// of its full blocks become most recently used — the tail first and the head last,
// so under pressure a chain loses its tail before its prefix.
//
// Thread-safety: none.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/types.h"
#include "sim/workload.h"

namespace infera::sim {

class PrefixCacheBound {
 public:
  // capacity_blocks == 0: unlimited.
  PrefixCacheBound(size_t capacity_blocks, size_t block_size);

  // `chain` holds the router hashes of the prompt's full blocks. Returns the
  // request's hit tokens.
  size_t Add(std::span<const core::BlockHash> chain, size_t prompt_tokens);

  uint64_t prompt_tokens() const { return prompt_tokens_; }
  uint64_t hit_tokens() const { return hit_tokens_; }
  double HitRate() const {
    return prompt_tokens_ == 0 ? 0.0 : static_cast<double>(hit_tokens_) / prompt_tokens_;
  }
  size_t capacity_blocks() const { return capacity_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    core::BlockHash hash = 0;
    uint32_t prev = kNone;  // towards the LRU end
    uint32_t next = kNone;  // towards the MRU end
  };
  void Unlink(uint32_t n);
  void PushMru(uint32_t n);
  void Touch(core::BlockHash hash);

  size_t capacity_;
  size_t block_size_;
  uint64_t prompt_tokens_ = 0;
  uint64_t hit_tokens_ = 0;
  absl::flat_hash_set<core::BlockHash> unlimited_;
  absl::flat_hash_map<core::BlockHash, uint32_t> where_;
  std::vector<Node> nodes_;
  uint32_t lru_ = kNone;
  uint32_t mru_ = kNone;
};

struct BoundRates {
  double pooled = 0;  // 0 when pooled_capacity_blocks == 0
  double infinite = 0;
  // Per request (workload order): prompt tokens the pooled cache served.
  std::vector<uint32_t> pooled_hit_tokens;
};
// Hashes every prompt of `workload` once (router hashing, core::AppendChain) and
// replays it through a pooled cache of `pooled_capacity_blocks` (0: skipped) and an
// unlimited one. `progress(n)` is told every few hundred requests.
BoundRates ComputeBounds(const Workload& workload, size_t block_size, size_t pooled_capacity_blocks,
                         const std::function<void(size_t)>& progress = nullptr);

}  // namespace infera::sim
