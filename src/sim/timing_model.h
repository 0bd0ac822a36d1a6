// TimingModel: how long one scheduler step of the simulated engine takes
// (architecture §14, doc/sim.md).
//
// The default coefficients are a published polynomial fit of one GPU (NVIDIA
// Dynamo's mocker):
//   prefill_ms(x) = a2·x² + a1·x + a0     x = uncached prompt tokens computed in the step
//   decode_ms(p)  = max(min_decode_ms, b2·p² + b1·p + b0)
//                                         p = active KV tokens / total KV tokens
//   step_ms = (x > 0 ? prefill_ms(x) : 0) + (decoding sequences > 0 ? decode_ms(p) : 0)
//   step_ns = step_ms · 1e6 / speedup
// Every coefficient is configurable (the binaries expose each as a flag).
//
// Thread-safety: immutable value type.
#pragma once

#include <cstddef>
#include <cstdint>

namespace infera::sim {

struct TimingModel {
  double prefill_a2 = 4.209989e-7;
  double prefill_a1 = 1.518344e-2;
  double prefill_a0 = 16.50142;
  double decode_b2 = -25.74;
  double decode_b1 = 54.01;
  double decode_b0 = 5.74;
  double min_decode_ms = 1.0;
  // Divides every duration: 10 means the simulated GPU is ten times faster.
  double speedup = 1.0;

  double PrefillMs(size_t uncached_tokens) const;
  // REQUIRES: 0 <= occupancy <= 1.
  double DecodeMs(double occupancy) const;
  // Duration of one step, speedup applied.
  int64_t StepNs(size_t prefill_tokens, size_t decode_seqs, double occupancy) const;
  // TTFT of a request alone on an idle engine: its uncached tokens (at least 1) in
  // chunks of `max_batched_tokens`, one prefill step each, speedup applied.
  int64_t IdlePrefillNs(size_t uncached_tokens, size_t max_batched_tokens) const;
};

}  // namespace infera::sim
