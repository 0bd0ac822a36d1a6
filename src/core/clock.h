// Injected time and randomness: the core never reads a clock or a global RNG.
#pragma once

#include <cstdint>

#include "base/splitmix64.h"

namespace infera::core {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds since an arbitrary epoch.
  virtual int64_t NowNs() const = 0;
};

// A clock tests and the offline simulator move by hand.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t now_ns = 0) : now_ns_(now_ns) {}
  int64_t NowNs() const override { return now_ns_; }
  void Set(int64_t now_ns) { now_ns_ = now_ns; }
  void Advance(int64_t delta_ns) { now_ns_ += delta_ns; }

 private:
  int64_t now_ns_;
};

// Seeded, reproducible randomness (SplitMix64).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;  // SplitMix64's golden-ratio increment
    return base::SplitMix64Finalize(state_);
  }
  // Uniform in [0, n). REQUIRES: n > 0.
  uint64_t Uniform(uint64_t n) { return Next() % n; }
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace infera::core
