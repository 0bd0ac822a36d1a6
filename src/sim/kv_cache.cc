#include "sim/kv_cache.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cassert>
#include <cstring>

namespace infera::sim {

core::BlockHash EngineHash(core::BlockHash parent, std::span<const core::TokenId> tokens,
                           uint64_t seed, std::span<const std::string> extra) {
  XXH3_state_t state;
  // reset_withSeed reads state.seed (to skip re-deriving the secret for the same
  // seed): it must be initialised first (valgrind: uninitialised value).
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset_withSeed(&state, seed);
  XXH3_64bits_update(&state, &parent, sizeof(parent));
  XXH3_64bits_update(&state, tokens.data(), tokens.size() * sizeof(core::TokenId));
  for (const std::string& key : extra) {
    const uint32_t n = static_cast<uint32_t>(key.size());
    XXH3_64bits_update(&state, &n, sizeof(n));
    XXH3_64bits_update(&state, key.data(), key.size());
  }
  return XXH3_64bits_digest(&state);
}

std::vector<std::string> CacheKeys::ExtraKeys(size_t index) const {
  std::vector<std::string> out;
  if (!lora_name.empty()) out.push_back(lora_name);
  if (index == 0 && !cache_salt.empty()) out.push_back(cache_salt);
  return out;
}

KvCache::KvCache(size_t num_blocks, size_t block_size)
    : block_size_(block_size), blocks_(num_blocks) {
  assert(num_blocks > 0 && block_size > 0);
  cached_.reserve(num_blocks);
  for (BlockId i = 0; i < num_blocks; ++i) PushFreeTail(i);
}

void KvCache::PushFreeTail(BlockId id) {
  Block& b = blocks_[id];
  b.prev = free_tail_;
  b.next = kNone;
  b.in_free = true;
  if (free_tail_ != kNone) {
    blocks_[free_tail_].next = id;
  } else {
    free_head_ = id;
  }
  free_tail_ = id;
  ++num_free_;
}

void KvCache::RemoveFree(BlockId id) {
  Block& b = blocks_[id];
  if (b.prev != kNone) {
    blocks_[b.prev].next = b.next;
  } else {
    free_head_ = b.next;
  }
  if (b.next != kNone) {
    blocks_[b.next].prev = b.prev;
  } else {
    free_tail_ = b.prev;
  }
  b.prev = b.next = kNone;
  b.in_free = false;
  --num_free_;
}

size_t KvCache::CountCachedPrefix(std::span<const core::BlockHash> hashes) const {
  size_t n = 0;
  for (core::BlockHash h : hashes) {
    if (!cached_.contains(h)) break;
    ++n;
  }
  return n;
}

size_t KvCache::CountFreeAmongCached(std::span<const core::BlockHash> hashes, size_t n) const {
  size_t free = 0;
  for (size_t i = 0; i < n; ++i) {
    auto it = cached_.find(hashes[i]);
    assert(it != cached_.end());
    if (blocks_[it->second].ref == 0) ++free;
  }
  return free;
}

void KvCache::AcquireCached(std::span<const core::BlockHash> hashes, size_t n,
                            std::vector<BlockId>& out) {
  for (size_t i = 0; i < n; ++i) {
    auto it = cached_.find(hashes[i]);
    assert(it != cached_.end());
    const BlockId id = it->second;
    if (blocks_[id].ref == 0) RemoveFree(id);
    ++blocks_[id].ref;
    out.push_back(id);
  }
}

void KvCache::Evict(BlockId id, std::vector<core::BlockHash>& removed) {
  Block& b = blocks_[id];
  cached_.erase(b.hash);
  removed.push_back(b.hash);
  b.cached = false;
  b.hash = 0;
  ++evictions_;
}

void KvCache::Allocate(size_t n, std::vector<BlockId>& out) {
  assert(n <= num_free_);
  std::vector<core::BlockHash> removed;
  for (size_t i = 0; i < n; ++i) {
    const BlockId id = free_head_;
    RemoveFree(id);
    if (blocks_[id].cached) Evict(id, removed);
    blocks_[id].ref = 1;
    out.push_back(id);
  }
  if (!removed.empty()) {
    KvEvent ev;
    ev.kind = KvEvent::Kind::kBlockRemoved;
    ev.block_hashes = std::move(removed);
    ev.block_size = static_cast<uint32_t>(block_size_);
    events_.push_back(std::move(ev));
  }
}

void KvCache::Cache(std::span<const BlockId> blocks, std::span<const core::BlockHash> hashes,
                    std::optional<core::BlockHash> parent, std::span<const core::TokenId> tokens,
                    std::span<const core::BlockHash> aux, const CacheKeys& keys,
                    size_t first_index) {
  assert(blocks.size() == hashes.size());
  assert(tokens.size() == blocks.size() * block_size_);
  KvEvent* open = nullptr;  // the BlockStored being extended by consecutive new blocks
  for (size_t i = 0; i < blocks.size(); ++i) {
    const core::BlockHash h = hashes[i];
    const std::optional<core::BlockHash> p = i == 0 ? parent : std::optional(hashes[i - 1]);
    Block& b = blocks_[blocks[i]];
    if (b.cached || cached_.contains(h)) {
      open = nullptr;
      continue;
    }
    cached_.emplace(h, blocks[i]);
    b.cached = true;
    b.hash = h;
    b.aux = aux.empty() ? 0 : aux[i];
    if (open == nullptr) {
      KvEvent ev;
      ev.kind = KvEvent::Kind::kBlockStored;
      ev.parent_hash = p;
      ev.block_size = static_cast<uint32_t>(block_size_);
      if (!keys.lora_name.empty()) {
        ev.lora_id = keys.lora_id;
        ev.lora_name = keys.lora_name;
      }
      events_.push_back(std::move(ev));
      open = &events_.back();
    }
    open->block_hashes.push_back(h);
    std::vector<std::string> extra = keys.ExtraKeys(first_index + i);
    if (extra.empty()) {
      open->extra_keys.emplace_back();
    } else {
      open->extra_keys.emplace_back(std::move(extra));
    }
    auto chunk = tokens.subspan(i * block_size_, block_size_);
    open->token_ids.insert(open->token_ids.end(), chunk.begin(), chunk.end());
  }
}

void KvCache::Release(std::span<const BlockId> blocks) {
  for (size_t i = blocks.size(); i-- > 0;) {
    Block& b = blocks_[blocks[i]];
    assert(b.ref > 0);
    if (--b.ref == 0) PushFreeTail(blocks[i]);
  }
}

void KvCache::Clear() {
  for (Block& b : blocks_) {
    b.cached = false;
    b.hash = 0;
  }
  cached_.clear();
  KvEvent ev;
  ev.kind = KvEvent::Kind::kAllBlocksCleared;
  ev.block_size = static_cast<uint32_t>(block_size_);
  events_.push_back(std::move(ev));
}

std::vector<std::pair<core::BlockHash, core::BlockHash>> KvCache::CachedBlocks() const {
  std::vector<std::pair<core::BlockHash, core::BlockHash>> out;
  out.reserve(cached_.size());
  for (const auto& [h, id] : cached_) out.emplace_back(h, blocks_[id].aux);
  return out;
}

std::vector<KvEvent> KvCache::TakeEvents() {
  std::vector<KvEvent> out;
  out.swap(events_);
  return out;
}

}  // namespace infera::sim
