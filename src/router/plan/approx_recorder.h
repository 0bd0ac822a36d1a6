// ApproxRecorder: approximate mode in the router (--kv-event-transport none with
// --approx-ttl-s > 0; doc/approx-mode.md). The PickPlanner's bridge between its
// picks, the core::ApproxCache (what each target is predicted to cache) and the
// router's KV index (where the selector reads views from).
//
// Before a pick the planner calls Expire (predictions past their TTL leave the
// views); after a pick, Record (the prompt's blocks join the picked target's view).
// A target leaving the fleet is forgotten (RemoveTarget) with its view.
//
// Thread-safety: none of its own; the PickPlanner calls it under its pick mutex
// (lock order: pick mutex, then the index's lock, as Retire does).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "core/approx_cache.h"
#include "core/hashing.h"
#include "core/types.h"
#include "events/shared_kv_index.h"

namespace infera::router {

struct ApproxCounters {
  std::atomic<uint64_t> recorded{0};  // blocks added to views by picks
  std::atomic<uint64_t> expired{0};   // blocks dropped at their TTL
  std::atomic<uint64_t> evicted{0};   // blocks dropped by the per-target bound
};

class ApproxRecorder {
 public:
  // REQUIRES: config.ttl_ns > 0, config.max_blocks > 0; index outlives this.
  ApproxRecorder(const core::ApproxConfig& config, events::SharedKvIndex& index);

  void Expire(int64_t now_ns);
  // `tokens`: the routed prompt; nothing is recorded for an empty one.
  // `keys`: the request's extra keys (its blocks hash as the pick's did).
  void Record(core::TargetId target, std::span<const core::TokenId> tokens,
              const core::HashKeys& keys, int64_t now_ns);
  void RemoveTarget(core::TargetId target);

  const ApproxCounters& counters() const { return counters_; }

 private:
  core::ApproxCache cache_;
  events::SharedKvIndex& index_;
  ApproxCounters counters_;
  std::vector<core::BlockHash> chain_;                                            // scratch
  std::vector<core::BlockHash> removed_;                                          // scratch
  std::vector<std::pair<core::TargetId, std::vector<core::BlockHash>>> expired_;  // scratch
};

}  // namespace infera::router
