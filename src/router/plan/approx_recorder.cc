#include "router/plan/approx_recorder.h"

#include "core/hashing.h"

namespace infera::router {

ApproxRecorder::ApproxRecorder(const core::ApproxConfig& config, events::SharedKvIndex& index)
    : cache_(config), index_(index) {}

void ApproxRecorder::Expire(int64_t now_ns) {
  expired_.clear();
  cache_.Expire(now_ns, [&](core::TargetId t, std::span<const core::BlockHash> gone) {
    expired_.emplace_back(t, std::vector<core::BlockHash>(gone.begin(), gone.end()));
  });
  if (expired_.empty()) return;
  index_.WithWrite([&](core::KvIndex& index) {
    for (const auto& [t, gone] : expired_) {
      if (index.BlockSize(t) == 0) continue;  // no longer a live target
      index.RemoveRouterHashes(t, gone, core::Tier::kDevice);
      counters_.expired.fetch_add(gone.size(), std::memory_order_relaxed);
    }
  });
}

void ApproxRecorder::Record(core::TargetId target, std::span<const core::TokenId> tokens,
                            const core::HashKeys& keys, int64_t now_ns) {
  if (tokens.empty()) return;
  const size_t block_size =
      index_.WithIndex([&](const core::KvIndex& index) { return index.BlockSize(target); });
  if (block_size == 0) return;
  chain_.clear();
  core::AppendChain(tokens, block_size, 0, keys, chain_);
  if (chain_.empty()) return;
  removed_.clear();
  std::vector<core::BlockHash> added = cache_.Record(target, chain_, now_ns, removed_);
  if (added.empty() && removed_.empty()) return;
  index_.WithWrite([&](core::KvIndex& index) {
    if (index.BlockSize(target) == 0) return;
    if (!removed_.empty()) index.RemoveRouterHashes(target, removed_, core::Tier::kDevice);
    if (!added.empty()) index.InsertRouterHashes(target, added, core::Tier::kDevice);
  });
  counters_.recorded.fetch_add(added.size(), std::memory_order_relaxed);
  counters_.evicted.fetch_add(removed_.size(), std::memory_order_relaxed);
}

void ApproxRecorder::RemoveTarget(core::TargetId target) { cache_.RemoveTarget(target); }

}  // namespace infera::router
