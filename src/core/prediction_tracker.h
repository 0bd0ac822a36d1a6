// PredictionTracker: how well the router's view predicts each target's cache
// (doc/selection.md, "Prediction error").
//
// On every response the router compares the pick's predicted hit tokens (consecutive
// prefix hits × block size) with what the engine reports it served from its prefix
// cache (usage.prompt_tokens_details.cached_tokens). Per target it keeps an
// exponentially weighted mean of the absolute error in tokens and of the relative
// error |predicted − reported| / max(predicted, reported) (0 when both are 0). A
// target whose relative error stays above `drift_threshold` (after `min_samples`
// responses) is flagged as drifting — events lost, a hash seed or block size that
// does not match, a different chat template — and its overlap is trusted less:
// Trust() is `drifting_trust` instead of 1, and the selector scales its credited
// hits by it. The flag clears when the error falls below half the threshold.
//
// Thread-safety: none; serialise with the selector that owns it.
//
// Example:
//   tracker.Record(target, /*predicted=*/pick.cache_hits * 16, usage_cached_tokens);
//   if (tracker.Get(target).drifting) ...
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/types.h"

namespace infera::core {

struct PredictionOptions {
  double alpha = 0.2;            // weight of the newest response in the means
  size_t min_samples = 8;        // responses before a target can be flagged
  double drift_threshold = 0.5;  // relative error that flags a target
  double drifting_trust = 0.25;  // credited hits are scaled by this while flagged
};

struct PredictionStats {
  uint64_t samples = 0;
  double abs_error_tokens = 0;    // EWMA
  double relative_error = 0;      // EWMA, in [0, 1]
  uint64_t predicted_tokens = 0;  // totals, for rates
  uint64_t reported_tokens = 0;
  bool drifting = false;
};

// The prompt tokens an engine reports as cached (usage.prompt_tokens_details
// .cached_tokens) when it holds the first `hit_blocks` blocks of a `prompt_tokens`-token
// prompt: vLLM (and the simulated engine) always compute the last prompt token, so at
// most (prompt_tokens - 1) / block_size blocks count. 0 for an empty prompt.
// REQUIRES: block_size > 0.
uint64_t PredictedHitTokens(uint32_t hit_blocks, size_t prompt_tokens, size_t block_size);

class PredictionTracker {
 public:
  explicit PredictionTracker(const PredictionOptions& options = {});

  void Record(TargetId target, uint64_t predicted_tokens, uint64_t reported_tokens);
  PredictionStats Get(TargetId target) const;
  // 1, or options.drifting_trust while the target is flagged.
  double Trust(TargetId target) const;
  void RemoveTarget(TargetId target);

  const PredictionOptions& options() const { return options_; }

 private:
  PredictionOptions options_;
  std::vector<PredictionStats> targets_;  // by TargetId, grown on demand
  // targets_[t].drifting, dense: Trust() is read for every candidate of a pick.
  std::vector<uint8_t> drifting_;
};

}  // namespace infera::core
