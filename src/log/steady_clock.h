// The process's monotonic clock behind core::Clock: the one real clock the edges
// (router, KV-event ingestor, log limiter) are given when nothing else is injected.
// src/core never reads a clock; tests and the offline simulator inject a ManualClock.
//
// Thread-safety: stateless.
#pragma once

#include <chrono>

#include "core/clock.h"

namespace infera::log {

class SteadyClock final : public core::Clock {
 public:
  int64_t NowNs() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// A process-wide instance, for options whose clock pointer is nullptr.
inline const core::Clock& ProcessSteadyClock() {
  static const SteadyClock clock;
  return clock;
}

}  // namespace infera::log
