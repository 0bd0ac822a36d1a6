#include "sim/timing_model.h"

#include <algorithm>
#include <cmath>

namespace infera::sim {

double TimingModel::PrefillMs(size_t uncached_tokens) const {
  const double x = static_cast<double>(uncached_tokens);
  return prefill_a2 * x * x + prefill_a1 * x + prefill_a0;
}

double TimingModel::DecodeMs(double occupancy) const {
  const double p = occupancy;
  return std::max(min_decode_ms, decode_b2 * p * p + decode_b1 * p + decode_b0);
}

int64_t TimingModel::StepNs(size_t prefill_tokens, size_t decode_seqs, double occupancy) const {
  double ms = 0;
  if (prefill_tokens > 0) ms += PrefillMs(prefill_tokens);
  if (decode_seqs > 0) ms += DecodeMs(occupancy);
  const double s = speedup > 0 ? speedup : 1.0;
  return static_cast<int64_t>(std::llround(ms * 1e6 / s));
}

int64_t TimingModel::IdlePrefillNs(size_t uncached_tokens, size_t max_batched_tokens) const {
  size_t left = std::max<size_t>(uncached_tokens, 1);
  const size_t chunk = std::max<size_t>(max_batched_tokens, 1);
  int64_t ns = 0;
  while (left > 0) {
    const size_t x = std::min(left, chunk);
    ns += StepNs(x, 0, 0);
    left -= x;
  }
  return ns;
}

}  // namespace infera::sim
