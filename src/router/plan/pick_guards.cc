#include "router/plan/pick_guards.h"

#include <optional>

namespace infera::router {

PickGuards& PickGuards::operator=(PickGuards&& other) noexcept {
  if (this != &other) {
    Release();
    mu_ = other.mu_;
    on_lowered_ = other.on_lowered_;
    clock_ = other.clock_;
    active_ = std::move(other.active_);
    other.active_.clear();
    demand_ = std::move(other.demand_);  // ours was released above
  }
  return *this;
}

void PickGuards::AddActive(core::LoadState::ActiveGuard guard) {
  if (guard.pending()) active_.push_back(std::move(guard));
}

void PickGuards::AddDemand(core::DecodeDemand::Reservation reservation) {
  demand_ = std::move(reservation);
}

void PickGuards::PrefillDone() {
  if (active_.empty()) return;
  const std::optional<int64_t> now =
      clock_ != nullptr ? std::optional<int64_t>(clock_->NowNs()) : std::nullopt;
  {
    absl::MutexLock lock(mu_);
    for (auto& g : active_) g.PrefillDone(now);
  }
  Lowered();
}

void PickGuards::Release() {
  if (!pending()) return;
  {
    absl::MutexLock lock(mu_);
    for (auto& g : active_) g.Release();
    active_.clear();
    demand_.Release();
  }
  Lowered();
}

}  // namespace infera::router
