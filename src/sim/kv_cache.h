// KvCache: the simulated engine's paged KV cache with prefix caching (doc/sim.md).
//
// `num_blocks` physical blocks of `block_size` tokens. A full block can be
// *cached* under its engine hash, EngineHash(parent, tokens, seed, extra) — the
// engine's own chained hash (XXH3-64 with a non-zero seed over the same bytes as the
// router's, then the block's extra keys, so it never equals the router's hash and the
// router's engine->router map is exercised). Extra keys are vLLM's
// (kv_cache_utils.generate_block_hash_extra_keys): a LoRA request's adapter name in
// every block, a request's cache_salt in its first block; a block without them hashes
// exactly as before. Blocks are reference-counted by the running sequences that use them.
// Blocks with refcount 0 sit in a free queue in LRU order (head = evicted first):
// allocation pops the head, and if that block was cached it is evicted (a
// BlockRemoved event). A prefix hit on a block in the free queue takes it out of
// the queue. Released blocks are appended to the tail in reverse order, so a
// sequence's last blocks are evicted before its first ones (as vLLM does).
//
// Events are appended to an internal list the owner drains with TakeEvents().
//
// Thread-safety: none (owned by one Engine).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/types.h"
#include "sim/kv_event.h"

namespace infera::sim {

using BlockId = uint32_t;

// The engine's own block hash (seeded XXH3-64 of parent ‖ tokens ‖ for each extra
// key: its length as u32 LE ‖ its bytes).
core::BlockHash EngineHash(core::BlockHash parent, std::span<const core::TokenId> tokens,
                           uint64_t seed, std::span<const std::string> extra = {});

// A request's cache keys beyond its tokens, as vLLM has them.
struct CacheKeys {
  std::string cache_salt{};  // empty: none (vLLM refuses an empty salt)
  std::string lora_name{};   // empty: the base model
  int64_t lora_id = 0;       // the adapter's id, with lora_name

  // The extra keys of block `index` of a chain: [lora_name] [cache_salt if index 0].
  std::vector<std::string> ExtraKeys(size_t index) const;
  bool empty() const { return cache_salt.empty() && lora_name.empty(); }
};

class KvCache {
 public:
  // REQUIRES: num_blocks > 0, block_size > 0.
  KvCache(size_t num_blocks, size_t block_size);

  size_t num_blocks() const { return blocks_.size(); }
  size_t block_size() const { return block_size_; }
  // Blocks with refcount 0 (cached or not): what Allocate can hand out.
  size_t NumFree() const { return num_free_; }
  size_t NumCached() const { return cached_.size(); }
  size_t NumUsed() const { return blocks_.size() - num_free_; }

  // Length of the run of `hashes`, from the first, that is cached.
  size_t CountCachedPrefix(std::span<const core::BlockHash> hashes) const;
  // How many of the first `n` hashes' blocks are in the free queue (refcount 0):
  // acquiring them reduces NumFree() by this much. REQUIRES: n <= CountCachedPrefix.
  size_t CountFreeAmongCached(std::span<const core::BlockHash> hashes, size_t n) const;
  // Takes a reference on the cached blocks of the first `n` hashes, appending them
  // to `out`. REQUIRES: n <= CountCachedPrefix(hashes).
  void AcquireCached(std::span<const core::BlockHash> hashes, size_t n, std::vector<BlockId>& out);
  // Takes `n` blocks from the head of the free queue (evicting cached ones),
  // appending them to `out` with refcount 1. REQUIRES: n <= NumFree().
  void Allocate(size_t n, std::vector<BlockId>& out);
  // Registers full blocks under their hashes: blocks[i] holds the tokens
  // tokens[i*bs, (i+1)*bs) with hash hashes[i]; the first block's parent is
  // `parent` (none for a chain's first block). Blocks whose hash is already cached
  // (another copy) stay uncached. Emits one BlockStored per run of new blocks.
  // REQUIRES: blocks.size() == hashes.size(), tokens.size() == bs × blocks.size().
  // `aux` (empty, or one per block) is stored beside each newly cached block and
  // returned by CachedBlocks(): the mock engine keeps the router's hash there for
  // its debug dump. `keys` and `first_index` (the index of blocks[0] in its chain)
  // give the events' lora_id, lora_name and per-block extra_keys.
  void Cache(std::span<const BlockId> blocks, std::span<const core::BlockHash> hashes,
             std::optional<core::BlockHash> parent, std::span<const core::TokenId> tokens,
             std::span<const core::BlockHash> aux = {}, const CacheKeys& keys = {},
             size_t first_index = 0);
  // Drops one reference from each block; blocks reaching 0 join the free queue tail
  // in reverse order.
  void Release(std::span<const BlockId> blocks);
  // Forgets every cached hash (AllBlocksCleared). Blocks in use stay allocated but
  // uncached.
  void Clear();

  // (engine hash, aux) of every cached block.
  std::vector<std::pair<core::BlockHash, core::BlockHash>> CachedBlocks() const;
  bool IsCached(core::BlockHash hash) const { return cached_.contains(hash); }

  std::vector<KvEvent> TakeEvents();
  // Counters.
  uint64_t evictions() const { return evictions_; }

 private:
  static constexpr BlockId kNone = UINT32_MAX;
  struct Block {
    core::BlockHash hash = 0;
    core::BlockHash aux = 0;
    uint32_t ref = 0;
    BlockId prev = kNone;  // free-queue links, valid while ref == 0
    BlockId next = kNone;
    bool cached = false;
    bool in_free = false;
  };
  void PushFreeTail(BlockId id);
  void RemoveFree(BlockId id);
  void Evict(BlockId id, std::vector<core::BlockHash>& removed);

  size_t block_size_;
  std::vector<Block> blocks_;
  BlockId free_head_ = kNone;
  BlockId free_tail_ = kNone;
  size_t num_free_ = 0;
  absl::flat_hash_map<core::BlockHash, BlockId> cached_;
  std::vector<KvEvent> events_;
  uint64_t evictions_ = 0;
};

}  // namespace infera::sim
