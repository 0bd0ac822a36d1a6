// Backoff: capped exponential retry delays with seeded jitter.
//
//   Backoff backoff(/*initial_ms=*/100, /*max_ms=*/5000, /*seed=*/1);
//   while (!Connect()) Sleep(backoff.NextDelayMs());
//   backoff.Reset();  // after a success
//
// The n-th delay since Reset() is uniform in [base/2, base] with
// base = min(max_ms, initial_ms * 2^n): retries spread out (no thundering herd
// after an etcd restart) and the sequence is reproducible for a given seed.
// Thread-safety: a value type for one thread.
#pragma once

#include <cstdint>

#include "core/clock.h"

namespace infera::discovery {

class Backoff {
 public:
  // REQUIRES: 0 < initial_ms <= max_ms.
  Backoff(int64_t initial_ms, int64_t max_ms, uint64_t seed);
  int64_t NextDelayMs();
  void Reset() { base_ms_ = initial_ms_; }

 private:
  int64_t initial_ms_;
  int64_t max_ms_;
  int64_t base_ms_;
  core::Random random_;
};

}  // namespace infera::discovery
