#include "core/prediction_tracker.h"

#include <algorithm>
#include <cmath>

namespace infera::core {

uint64_t PredictedHitTokens(uint32_t hit_blocks, size_t prompt_tokens, size_t block_size) {
  if (prompt_tokens == 0) return 0;
  const size_t usable = (prompt_tokens - 1) / block_size;
  return static_cast<uint64_t>(std::min<size_t>(hit_blocks, usable)) * block_size;
}

PredictionTracker::PredictionTracker(const PredictionOptions& options) : options_(options) {}

void PredictionTracker::Record(TargetId target, uint64_t predicted_tokens,
                               uint64_t reported_tokens) {
  if (target >= targets_.size()) {
    targets_.resize(static_cast<size_t>(target) + 1);
    drifting_.resize(targets_.size());
  }
  PredictionStats& s = targets_[target];
  const double p = static_cast<double>(predicted_tokens);
  const double r = static_cast<double>(reported_tokens);
  const double abs_error = std::fabs(p - r);
  const double relative = std::max(p, r) > 0 ? abs_error / std::max(p, r) : 0.0;
  // The first response sets the means; later ones move them by alpha.
  const double a = s.samples == 0 ? 1.0 : options_.alpha;
  s.abs_error_tokens += a * (abs_error - s.abs_error_tokens);
  s.relative_error += a * (relative - s.relative_error);
  ++s.samples;
  s.predicted_tokens += predicted_tokens;
  s.reported_tokens += reported_tokens;
  if (s.samples >= options_.min_samples && s.relative_error > options_.drift_threshold) {
    s.drifting = true;
  } else if (s.relative_error < options_.drift_threshold / 2) {
    s.drifting = false;
  }
  drifting_[target] = s.drifting ? 1 : 0;
}

PredictionStats PredictionTracker::Get(TargetId target) const {
  return target < targets_.size() ? targets_[target] : PredictionStats{};
}

double PredictionTracker::Trust(TargetId target) const {
  return target < drifting_.size() && drifting_[target] != 0 ? options_.drifting_trust : 1.0;
}

void PredictionTracker::RemoveTarget(TargetId target) {
  if (target < targets_.size()) {
    targets_[target] = PredictionStats{};
    drifting_[target] = 0;
  }
}

}  // namespace infera::core
