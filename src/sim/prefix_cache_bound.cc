#include "sim/prefix_cache_bound.h"

#include <algorithm>

#include "core/hashing.h"

namespace infera::sim {

PrefixCacheBound::PrefixCacheBound(size_t capacity_blocks, size_t block_size)
    : capacity_(capacity_blocks), block_size_(block_size) {
  if (capacity_ > 0) {
    nodes_.reserve(capacity_);
    where_.reserve(capacity_);
  }
}

void PrefixCacheBound::Unlink(uint32_t n) {
  Node& x = nodes_[n];
  if (x.prev != kNone) {
    nodes_[x.prev].next = x.next;
  } else {
    lru_ = x.next;
  }
  if (x.next != kNone) {
    nodes_[x.next].prev = x.prev;
  } else {
    mru_ = x.prev;
  }
  x.prev = x.next = kNone;
}

void PrefixCacheBound::PushMru(uint32_t n) {
  Node& x = nodes_[n];
  x.prev = mru_;
  x.next = kNone;
  if (mru_ != kNone) {
    nodes_[mru_].next = n;
  } else {
    lru_ = n;
  }
  mru_ = n;
}

void PrefixCacheBound::Touch(core::BlockHash hash) {
  auto it = where_.find(hash);
  if (it != where_.end()) {
    if (it->second != mru_) {
      Unlink(it->second);
      PushMru(it->second);
    }
    return;
  }
  uint32_t n;
  if (nodes_.size() < capacity_) {
    n = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back({});
  } else {
    n = lru_;
    Unlink(n);
    where_.erase(nodes_[n].hash);
  }
  nodes_[n].hash = hash;
  where_.emplace(hash, n);
  PushMru(n);
}

size_t PrefixCacheBound::Add(std::span<const core::BlockHash> chain, size_t prompt_tokens) {
  prompt_tokens_ += prompt_tokens;
  const size_t max_hit = prompt_tokens == 0 ? 0 : (prompt_tokens - 1) / block_size_;
  size_t hits = 0;
  if (capacity_ == 0) {
    while (hits < chain.size() && unlimited_.contains(chain[hits])) ++hits;
    for (core::BlockHash h : chain) unlimited_.insert(h);
  } else {
    while (hits < chain.size() && where_.contains(chain[hits])) ++hits;
    for (size_t i = chain.size(); i-- > 0;) Touch(chain[i]);
  }
  const size_t hit_tokens = std::min(hits, max_hit) * block_size_;
  hit_tokens_ += hit_tokens;
  return hit_tokens;
}

BoundRates ComputeBounds(const Workload& workload, size_t block_size, size_t pooled_capacity_blocks,
                         const std::function<void(size_t)>& progress) {
  PrefixCacheBound pooled(pooled_capacity_blocks, block_size);
  PrefixCacheBound infinite(0, block_size);
  std::vector<core::TokenId> tokens;
  std::vector<core::BlockHash> chain;
  size_t reported = 0;
  BoundRates out;
  out.pooled_hit_tokens.resize(workload.requests.size());
  for (size_t i = 0; i < workload.requests.size(); ++i) {
    workload.Materialize(workload.requests[i], tokens);
    chain.clear();
    core::AppendChain(tokens, block_size, 0, chain);
    if (pooled_capacity_blocks > 0) {
      out.pooled_hit_tokens[i] = static_cast<uint32_t>(pooled.Add(chain, tokens.size()));
    }
    infinite.Add(chain, tokens.size());
    if (progress && (i + 1) % 256 == 0) {
      progress(i + 1 - reported);
      reported = i + 1;
    }
  }
  if (progress) progress(workload.requests.size() - reported);
  out.pooled = pooled_capacity_blocks > 0 ? pooled.HitRate() : 0;
  out.infinite = infinite.HitRate();
  return out;
}

}  // namespace infera::sim
