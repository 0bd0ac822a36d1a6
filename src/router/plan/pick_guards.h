// PickGuards: every hold one request has on the planner's state, released once.
//
// The active-blocks guard of each picked target (core::LoadState), one per leg, and
// the decode leg's decode-demand reservation (core::DecodeDemand::Reservation), so
// "released exactly once, however the request ends" stays one object's job.
// Release() takes the pick mutex once for all holds; the destructor releases what
// is still held (failover drops an attempt's guards before the next pick).
//
// Thread-safety: one owner (the request); Release takes the planner's mutex.
// Move-only; a moved-from or empty PickGuards releases nothing.
#pragma once

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "core/decode_demand.h"
#include "core/load_state.h"

namespace infera::router {

class PickGuards {
 public:
  PickGuards() = default;
  // `mu` guards the state the holds point into (the planner's pick mutex).
  // `on_lowered` (may be null or empty; outlives the guards): called after PrefillDone
  // and Release, outside `mu`, when they lowered a load (the admission queue's drain).
  // `clock` (may be null; outlives the guards): the time of PrefillDone, a sample of the
  // target's prefill rate (core::LoadState, --kv-timed-prefill).
  explicit PickGuards(absl::Mutex* mu, const std::function<void()>* on_lowered = nullptr,
                      const core::Clock* clock = nullptr)
      : mu_(mu), on_lowered_(on_lowered), clock_(clock) {}
  PickGuards(PickGuards&& other) noexcept { *this = std::move(other); }
  PickGuards& operator=(PickGuards&& other) noexcept;
  PickGuards(const PickGuards&) = delete;
  PickGuards& operator=(const PickGuards&) = delete;
  ~PickGuards() { Release(); }

  // REQUIRES: the caller holds *mu (the planner adds holds while it picks).
  void AddActive(core::LoadState::ActiveGuard guard);
  // REQUIRES: the caller holds *mu; at most one reservation per PickGuards.
  void AddDemand(core::DecodeDemand::Reservation reservation);

  // The first token arrived: each hold stops counting as pending prefill
  // (core::LoadState::ActiveGuard::PrefillDone); its active blocks stay held.
  void PrefillDone() ABSL_LOCKS_EXCLUDED(*mu_);
  // Releases every hold now; later calls (and the destructor) do nothing.
  void Release() ABSL_LOCKS_EXCLUDED(*mu_);
  bool pending() const { return !active_.empty() || demand_.pending(); }

 private:
  void Lowered() const {
    if (on_lowered_ != nullptr && *on_lowered_) (*on_lowered_)();
  }

  absl::Mutex* mu_ = nullptr;
  const std::function<void()>* on_lowered_ = nullptr;
  const core::Clock* clock_ = nullptr;
  absl::InlinedVector<core::LoadState::ActiveGuard, 2> active_;
  core::DecodeDemand::Reservation demand_;
};

}  // namespace infera::router
