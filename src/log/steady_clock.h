// The process's monotonic clock behind core::Clock: the one real clock the edges
// (router, KV-event ingestor, log limiter) are given when nothing else is injected.
// src/core never reads a clock; tests and the offline simulator inject a ManualClock.
//
// Thread-safety: stateless.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

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

// Microseconds on the monotonic clock, and the calling thread's CPU time: for the
// timings a log line reports (snapshot checks and builds), never for a decision.
inline int64_t SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline int64_t ThreadCpuUs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000 + ts.tv_nsec / 1000;
}

// A process-wide instance, for options whose clock pointer is nullptr.
inline const core::Clock& ProcessSteadyClock() {
  static const SteadyClock clock;
  return clock;
}

}  // namespace infera::log
