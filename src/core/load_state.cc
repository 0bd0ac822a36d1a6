#include "core/load_state.h"

#include <cassert>
#include <utility>

namespace infera::core {
namespace {

// Below this the lazy scale is folded back into the stored values, so they never
// overflow (each value is at most a few million blocks / scale).
constexpr double kRenormalizeBelow = 1e-150;

}  // namespace

LoadState::ActiveGuard::ActiveGuard(ActiveGuard&& other) noexcept
    : state_(std::exchange(other.state_, nullptr)),
      target_(other.target_),
      generation_(other.generation_),
      blocks_(std::move(other.blocks_)),
      anonymous_blocks_(std::exchange(other.anonymous_blocks_, 0)) {}

LoadState::ActiveGuard& LoadState::ActiveGuard::operator=(ActiveGuard&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = std::exchange(other.state_, nullptr);
    target_ = other.target_;
    generation_ = other.generation_;
    blocks_ = std::move(other.blocks_);
    anonymous_blocks_ = std::exchange(other.anonymous_blocks_, 0);
  }
  return *this;
}

LoadState::ActiveGuard::~ActiveGuard() { Release(); }

void LoadState::ActiveGuard::Release() {
  LoadState* state = std::exchange(state_, nullptr);
  if (state != nullptr) state->ReleaseGuard(*this);
  blocks_.clear();
  blocks_.shrink_to_fit();
  anonymous_blocks_ = 0;
}

LoadState::LoadState(double recent_decay) : recent_decay_(recent_decay) {
  assert(recent_decay >= 0 && recent_decay <= 1);
}

LoadState::Slot& LoadState::SlotFor(TargetId target) {
  if (target >= slots_.size()) slots_.resize(static_cast<size_t>(target) + 1);
  Slot& slot = slots_[target];
  slot.live = true;
  return slot;
}

const LoadState::Slot* LoadState::FindSlot(TargetId target) const {
  return target < slots_.size() && slots_[target].live ? &slots_[target] : nullptr;
}

LoadState::ActiveGuard LoadState::AddActive(TargetId target, std::span<const BlockHash> blocks,
                                            size_t anonymous_blocks) {
  Slot& slot = SlotFor(target);
  ActiveGuard guard;
  guard.state_ = this;
  guard.target_ = target;
  guard.generation_ = slot.generation;
  guard.blocks_.reserve(blocks.size());
  for (BlockHash h : blocks) {
    // A chain holds distinct hashes; a repeated one is counted (and released) once
    // per occurrence, which keeps the refcounts balanced either way.
    ++slot.active[h];
    guard.blocks_.push_back(h);
  }
  guard.anonymous_blocks_ = anonymous_blocks;
  slot.anonymous_blocks += anonymous_blocks;
  ++slot.pending_guards;
  return guard;
}

void LoadState::ReleaseGuard(ActiveGuard& guard) {
  if (guard.target_ >= slots_.size()) return;
  Slot& slot = slots_[guard.target_];
  // The target was removed (and maybe its id reused) since the pick: nothing to do.
  if (!slot.live || slot.generation != guard.generation_) return;
  for (BlockHash h : guard.blocks_) {
    auto it = slot.active.find(h);
    assert(it != slot.active.end());
    if (it == slot.active.end()) continue;
    if (--it->second == 0) slot.active.erase(it);
  }
  assert(slot.anonymous_blocks >= guard.anonymous_blocks_);
  slot.anonymous_blocks -= guard.anonymous_blocks_;
  --slot.pending_guards;
}

void LoadState::DecayRecent() {
  if (recent_decay_ == 0 || recent_decay_ == 1) return;
  recent_scale_ *= recent_decay_;
  if (recent_scale_ < kRenormalizeBelow) {
    for (Slot& slot : slots_) slot.recent_scaled *= recent_scale_;
    recent_scale_ = 1.0;
  }
}

void LoadState::ChargeRecent(TargetId target, double blocks) {
  if (recent_decay_ == 0) return;
  SlotFor(target).recent_scaled += blocks / recent_scale_;
}

size_t LoadState::ActiveBlocks(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? slot->active.size() + slot->anonymous_blocks : 0;
}

double LoadState::RecentBlocks(TargetId target) const {
  const Slot* slot = FindSlot(target);
  return slot ? slot->recent_scaled * recent_scale_ : 0.0;
}

size_t LoadState::PendingGuards() const {
  size_t n = 0;
  for (const Slot& slot : slots_) n += slot.live ? slot.pending_guards : 0;
  return n;
}

void LoadState::RemoveTarget(TargetId target) {
  if (target >= slots_.size()) return;
  Slot& slot = slots_[target];
  const uint64_t next_generation = slot.generation + 1;
  slot = Slot{};
  slot.generation = next_generation;
}

}  // namespace infera::core
