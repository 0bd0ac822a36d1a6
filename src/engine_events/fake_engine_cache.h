// FakeEngineCache: a small, seeded model of an engine's prefix cache that emits the KV
// events a real engine would (BlockStored with parent chains, BlockRemoved on LRU
// eviction of leaf blocks, AllBlocksCleared) and knows the true set of blocks it holds.
// Tests compare the router's view with TruthRouterHashes(); the benchmark records its
// batches as a realistic stream. Engine hashes are random (not the router's), so the
// engine->router mapping is exercised.
//
// Thread-safety: none (a test/bench helper).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/clock.h"
#include "core/hashing.h"
#include "engine_events/event_encoder.h"

namespace infera::events {

struct FakeEngineOptions {
  uint64_t seed = 1;
  uint32_t block_size = 16;
  size_t capacity_blocks = 2048;
  size_t documents = 32;        // shared prefixes requests draw from
  size_t document_blocks = 64;  // length of each shared prefix
  size_t max_tail_blocks = 8;   // unique blocks after the shared part
  size_t requests_per_batch = 4;
};

class FakeEngineCache {
 public:
  explicit FakeEngineCache(FakeEngineOptions options) : o_(options), rng_(options.seed) {
    for (size_t d = 0; d < o_.documents; ++d) {
      std::vector<core::TokenId> doc(o_.document_blocks * o_.block_size);
      for (auto& t : doc) t = static_cast<core::TokenId>(rng_.Uniform(150'000));
      documents_.push_back(std::move(doc));
    }
  }

  // One scheduler step's events: a few requests stored, then evictions.
  EventBatch NextBatch() {
    EventBatch batch;
    batch.ts = static_cast<double>(++step_);
    for (size_t r = 0; r < o_.requests_per_batch; ++r) Request(batch);
    Evict(batch);
    return batch;
  }

  // Forgets everything (an engine reset) and returns the batch announcing it.
  EventBatch Clear() {
    blocks_.clear();
    leaves_.clear();
    EventBatch batch;
    batch.ts = static_cast<double>(++step_);
    batch.events.push_back(AllCleared{});
    return batch;
  }

  std::vector<core::BlockHash> TruthRouterHashes() const {
    std::vector<core::BlockHash> out;
    out.reserve(blocks_.size());
    for (const auto& [h, b] : blocks_) out.push_back(h);
    std::sort(out.begin(), out.end());
    return out;
  }
  size_t size() const { return blocks_.size(); }

 private:
  struct Block {
    uint64_t engine_hash = 0;
    std::optional<core::BlockHash> parent;  // router hash
    uint32_t children = 0;
    uint64_t last_used = 0;
  };

  void Request(EventBatch& batch) {
    const auto& doc = documents_[rng_.Uniform(documents_.size())];
    const size_t shared = 1 + rng_.Uniform(o_.document_blocks);
    const size_t tail = rng_.Uniform(o_.max_tail_blocks + 1);
    std::vector<core::TokenId> tokens(doc.begin(), doc.begin() + shared * o_.block_size);
    for (size_t i = 0; i < tail * o_.block_size; ++i) {
      tokens.push_back(static_cast<core::TokenId>(rng_.Uniform(150'000)));
    }
    const std::vector<core::BlockHash> chain = core::HashChain(tokens, o_.block_size);
    ++clock_;
    Stored stored;
    stored.block_size = o_.block_size;
    std::optional<core::BlockHash> parent;
    for (size_t i = 0; i < chain.size(); ++i) {
      auto it = blocks_.find(chain[i]);
      if (it != blocks_.end()) {
        Touch(chain[i], it->second);
        parent = chain[i];
        continue;
      }
      if (stored.engine_hashes.empty()) {
        if (parent) stored.parent = blocks_[*parent].engine_hash;
      }
      Block b;
      b.engine_hash = rng_.Next();
      b.parent = parent;
      b.last_used = clock_;
      if (parent) {
        Block& p = blocks_[*parent];
        if (p.children++ == 0) leaves_.erase({p.last_used, *parent});
      }
      blocks_[chain[i]] = b;
      leaves_.insert({b.last_used, chain[i]});
      stored.engine_hashes.push_back(b.engine_hash);
      stored.token_ids.insert(stored.token_ids.end(), tokens.begin() + i * o_.block_size,
                              tokens.begin() + (i + 1) * o_.block_size);
      parent = chain[i];
    }
    if (!stored.engine_hashes.empty()) batch.events.push_back(std::move(stored));
  }

  void Touch(core::BlockHash h, Block& b) {
    if (b.children == 0) leaves_.erase({b.last_used, h});
    b.last_used = clock_;
    if (b.children == 0) leaves_.insert({b.last_used, h});
  }

  void Evict(EventBatch& batch) {
    Removed removed;
    while (blocks_.size() > o_.capacity_blocks && !leaves_.empty()) {
      const auto [used, h] = *leaves_.begin();
      leaves_.erase(leaves_.begin());
      auto it = blocks_.find(h);
      removed.engine_hashes.push_back(it->second.engine_hash);
      const std::optional<core::BlockHash> parent = it->second.parent;
      blocks_.erase(it);
      if (parent) {
        Block& p = blocks_[*parent];
        if (--p.children == 0) leaves_.insert({p.last_used, *parent});
      }
    }
    if (!removed.engine_hashes.empty()) batch.events.push_back(std::move(removed));
  }

  FakeEngineOptions o_;
  core::Random rng_;
  std::vector<std::vector<core::TokenId>> documents_;
  absl::flat_hash_map<core::BlockHash, Block> blocks_;
  std::set<std::pair<uint64_t, core::BlockHash>> leaves_;  // (last_used, hash) of leaves
  uint64_t clock_ = 0;
  uint64_t step_ = 0;
};

}  // namespace infera::events
