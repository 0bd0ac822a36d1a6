// LoadState: the load term of the routing cost (doc/selection.md).
//
// Two parts, per target:
//  * Active blocks: a refcount of distinct in-flight prompt block hashes. A request
//    adds its chain when it is picked and releases it exactly once, through the
//    move-only ActiveGuard, on completion, failure, cancellation or an abandoned pick.
//    Two in-flight requests sharing a prefix count the shared blocks once. Requests
//    without token ids (no tokenizer) add anonymous blocks that are never shared.
//  * Recent blocks (Infera's guard against a 100/0 split under serial traffic): on
//    each kv-aware pick every target's value is multiplied by `recent_decay`
//    (--kv-recent-decay, 0.97; 0 turns it off) and the winner is charged the blocks
//    it missed.
// Load(t) = ActiveBlocks(t) + RecentBlocks(t).
//
// Targets are the KvIndex's TargetIds. State for a target is created on first use;
// RemoveTarget() drops it. Ids are reused by the index, so every target slot carries
// a generation: a guard whose target was removed (even if the id was reused since)
// releases nothing.
//
// Thread-safety: none. Every call, including ActiveGuard::Release() and the guard's
// destructor, must be serialised with the other calls on the same LoadState (the
// server holds its pick mutex around them). The LoadState must outlive its guards.
//
// Example:
//   LoadState load(/*recent_decay=*/0.97);
//   LoadState::ActiveGuard guard = load.AddActive(target, chain);
//   ... request runs ...
//   guard.Release();  // or let it go out of scope
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/types.h"

namespace infera::core {

class LoadState {
 public:
  // Releases one request's active blocks exactly once: at Release() or destruction,
  // whichever comes first. Moving transfers the obligation; a moved-from or
  // default-constructed guard releases nothing.
  class ActiveGuard {
   public:
    ActiveGuard() = default;
    ActiveGuard(ActiveGuard&& other) noexcept;
    ActiveGuard& operator=(ActiveGuard&& other) noexcept;  // releases the held one first
    ActiveGuard(const ActiveGuard&) = delete;
    ActiveGuard& operator=(const ActiveGuard&) = delete;
    ~ActiveGuard();

    // Releases now; later calls (and the destructor) do nothing.
    void Release();
    // Whether a release is still pending.
    bool pending() const { return state_ != nullptr; }
    TargetId target() const { return target_; }
    // Blocks this guard holds: distinct hashes plus anonymous blocks.
    size_t block_count() const { return blocks_.size() + anonymous_blocks_; }

   private:
    friend class LoadState;
    LoadState* state_ = nullptr;
    TargetId target_ = 0;
    uint64_t generation_ = 0;
    std::vector<BlockHash> blocks_;
    size_t anonymous_blocks_ = 0;
  };

  // REQUIRES: 0 <= recent_decay <= 1.
  explicit LoadState(double recent_decay = 0.97);
  LoadState(const LoadState&) = delete;
  LoadState& operator=(const LoadState&) = delete;

  // Adds one request's prompt blocks to `target`'s active set: each distinct hash in
  // `blocks` once (refcounted across requests), plus `anonymous_blocks` that are
  // never shared (requests whose tokens are unknown).
  ActiveGuard AddActive(TargetId target, std::span<const BlockHash> blocks,
                        size_t anonymous_blocks = 0);

  // Multiplies every target's recent blocks by the decay (O(1), lazily scaled).
  void DecayRecent();
  // Adds `blocks` to the target's recent blocks (no-op when the decay is 0).
  void ChargeRecent(TargetId target, double blocks);

  // Distinct in-flight blocks (plus anonymous ones) on the target.
  size_t ActiveBlocks(TargetId target) const;
  double RecentBlocks(TargetId target) const;
  double Load(TargetId target) const { return ActiveBlocks(target) + RecentBlocks(target); }
  // Guards handed out and not yet released, across all live targets.
  size_t PendingGuards() const;

  // Drops all state of the target; its outstanding guards become no-ops.
  void RemoveTarget(TargetId target);

  double recent_decay() const { return recent_decay_; }

 private:
  struct Slot {
    uint64_t generation = 1;
    bool live = false;
    absl::flat_hash_map<BlockHash, uint32_t> active;  // hash -> refcount
    size_t anonymous_blocks = 0;
    size_t pending_guards = 0;
    double recent_scaled = 0;  // recent blocks / recent_scale_
  };
  Slot& SlotFor(TargetId target);
  const Slot* FindSlot(TargetId target) const;
  void ReleaseGuard(ActiveGuard& guard);

  double recent_decay_;
  // Lazy decay: a target's recent blocks are recent_scaled * recent_scale_, so a
  // decay step is one multiplication, not one per target.
  double recent_scale_ = 1.0;
  std::vector<Slot> slots_;
};

}  // namespace infera::core
