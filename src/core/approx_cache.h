// ApproxCache: approximate mode, for engines that publish no KV events
// (--kv-event-transport none; doc/approx-mode.md).
//
// The router cannot see what an engine caches, so it predicts it from its own
// decisions, as NVIDIA Dynamo's approximate indexer and SGLang's gateway do: every
// block of a routed prompt is assumed cached on the picked target from the pick on,
// for `ttl_ns` (a later pick of the same block on the same target refreshes it), and
// a target holds at most `max_blocks` predicted blocks (the least recently picked
// go first). The cache only says what to insert into and remove from the target's
// view in the KV index (router hashes, device tier); the selector's cost is
// unchanged.
//
// Eviction order: oldest pick first; within one pick, the deepest block first, so a
// view stays prefix-closed as an engine's LRU (leaves first) keeps it.
//
// Example:
//   ApproxCache cache({.ttl_ns = 120'000'000'000, .max_blocks = 65536});
//   std::vector<BlockHash> removed;
//   std::vector<BlockHash> added = cache.Record(t, chain, now_ns, removed);
//   cache.Expire(now_ns, [&](TargetId t, std::span<const BlockHash> gone) { ... });
//
// Pure (time is passed in). Thread-safety: none; the caller serialises.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "core/types.h"

namespace infera::core {

struct ApproxConfig {
  int64_t ttl_ns = 120'000'000'000;  // --approx-ttl-s (0: approximate mode off)
  size_t max_blocks = 262'144;       // per target, --approx-max-blocks
};

class ApproxCache {
 public:
  // REQUIRES: config.ttl_ns > 0, config.max_blocks > 0.
  explicit ApproxCache(const ApproxConfig& config);

  // Records that `chain` (router hashes, root first) was routed to `target` at now_ns.
  // Returns the blocks new to the target's prediction (insert them into the view);
  // blocks dropped to keep the target within max_blocks are appended to `removed`
  // (remove them from the view). A block both new and dropped at once (a chain
  // longer than max_blocks) is in neither.
  std::vector<BlockHash> Record(TargetId target, std::span<const BlockHash> chain, int64_t now_ns,
                                std::vector<BlockHash>& removed);

  // Drops every prediction older than ttl at now_ns: calls removed(target, hashes)
  // once per target that lost blocks. Cheap when nothing expired (one look per target).
  void Expire(int64_t now_ns,
              absl::FunctionRef<void(TargetId, std::span<const BlockHash>)> removed);

  // Forgets the target (it left the fleet; its view is dropped with it).
  void RemoveTarget(TargetId target);

  size_t BlockCount(TargetId target) const;
  // Whether the target's prediction holds the block.
  bool Holds(TargetId target, BlockHash hash) const;

 private:
  struct Stamped {
    BlockHash hash;
    uint64_t stamp;  // the pick that (last) recorded it
  };
  struct TargetCache {
    absl::flat_hash_map<BlockHash, uint64_t> live;  // hash -> latest stamp
    std::deque<Stamped> order;                      // oldest first; stale entries skipped
    std::deque<int64_t> stamp_times;                // pick time of stamps first_stamp..
    uint64_t first_stamp = 0;                       // stamp of stamp_times.front()
    uint64_t next_stamp = 0;
  };
  // Pops the front of `c.order`; appends the hash to `removed` when it was live.
  void PopOldest(TargetCache& c, std::vector<BlockHash>& removed);
  // Drops stamp times no entry of `order` refers to any more.
  static void TrimStampTimes(TargetCache& c);
  // Rebuilds `order` without stale entries once they outnumber the live ones.
  static void Compact(TargetCache& c);

  const ApproxConfig config_;
  absl::flat_hash_map<TargetId, TargetCache> targets_;
  std::vector<BlockHash> scratch_;
};

}  // namespace infera::core
