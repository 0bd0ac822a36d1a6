#include "core/approx_cache.h"

#include <algorithm>

namespace infera::core {

ApproxCache::ApproxCache(const ApproxConfig& config) : config_(config) {}

void ApproxCache::PopOldest(TargetCache& c, std::vector<BlockHash>& removed) {
  const Stamped oldest = c.order.front();
  c.order.pop_front();
  auto it = c.live.find(oldest.hash);
  if (it != c.live.end() && it->second == oldest.stamp) {
    c.live.erase(it);
    removed.push_back(oldest.hash);
  }
}

void ApproxCache::TrimStampTimes(TargetCache& c) {
  while (!c.stamp_times.empty() && (c.order.empty() || c.order.front().stamp > c.first_stamp)) {
    c.stamp_times.pop_front();
    ++c.first_stamp;
  }
}

void ApproxCache::Compact(TargetCache& c) {
  std::deque<Stamped> kept;
  for (const Stamped& s : c.order) {
    auto it = c.live.find(s.hash);
    if (it != c.live.end() && it->second == s.stamp) kept.push_back(s);
  }
  c.order.swap(kept);
  TrimStampTimes(c);
}

std::vector<BlockHash> ApproxCache::Record(TargetId target, std::span<const BlockHash> chain,
                                           int64_t now_ns, std::vector<BlockHash>& removed) {
  std::vector<BlockHash> added;
  if (chain.empty()) return added;
  TargetCache& c = targets_[target];
  const uint64_t stamp = c.next_stamp++;
  // stamp_times covers first_stamp .. stamp - 1 (or is empty): append this pick's.
  if (c.stamp_times.empty()) c.first_stamp = stamp;
  c.stamp_times.push_back(now_ns);
  // Deepest first: the oldest-first eviction then drops a pick's leaves before its root.
  for (size_t i = chain.size(); i-- > 0;) {
    auto [it, inserted] = c.live.try_emplace(chain[i], stamp);
    if (inserted) {
      added.push_back(chain[i]);
    } else {
      it->second = stamp;
    }
    c.order.push_back({chain[i], stamp});
  }
  const size_t removed_before = removed.size();
  while (c.live.size() > config_.max_blocks) PopOldest(c, removed);
  // A block of this pick dropped at once never reached the view: in neither list.
  for (size_t i = removed_before; i < removed.size();) {
    auto it = std::find(added.begin(), added.end(), removed[i]);
    if (it == added.end()) {
      ++i;
      continue;
    }
    added.erase(it);
    removed.erase(removed.begin() + static_cast<std::ptrdiff_t>(i));
  }
  TrimStampTimes(c);
  if (c.order.size() > 2 * c.live.size() + 1024) Compact(c);
  // Root first, as the index inserts a chain.
  std::reverse(added.begin(), added.end());
  return added;
}

void ApproxCache::Expire(int64_t now_ns,
                         absl::FunctionRef<void(TargetId, std::span<const BlockHash>)> removed) {
  for (auto& [target, c] : targets_) {
    scratch_.clear();
    while (!c.order.empty()) {
      const int64_t picked_ns = c.stamp_times[c.order.front().stamp - c.first_stamp];
      if (now_ns - picked_ns < config_.ttl_ns) break;
      PopOldest(c, scratch_);
    }
    TrimStampTimes(c);
    if (!scratch_.empty()) removed(target, scratch_);
  }
}

void ApproxCache::RemoveTarget(TargetId target) { targets_.erase(target); }

size_t ApproxCache::BlockCount(TargetId target) const {
  auto it = targets_.find(target);
  return it == targets_.end() ? 0 : it->second.live.size();
}

bool ApproxCache::Holds(TargetId target, BlockHash hash) const {
  auto it = targets_.find(target);
  return it != targets_.end() && it->second.live.contains(hash);
}

}  // namespace infera::core
