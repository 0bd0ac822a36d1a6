// LogLimiter: at most one log line per interval for one log site, from any thread.
//
//   static LogLimiter limiter;
//   if (uint64_t skipped = 0; limiter.Allow(&skipped)) {
//     spdlog::warn("... ({} more in the last second not logged)", ..., skipped);
//   }
//
// Per-request warnings (a worker's failure, a client's bad input) use it so that a
// flood of such requests cannot flood the log. The wall clock (steady_clock) paces a
// log line, not a routing decision, so it is read here rather than injected.
//
// Thread-safety: Allow() may run on every thread at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace infera::router {

class LogLimiter {
 public:
  explicit LogLimiter(int64_t interval_ms = 1000) : interval_ns_(interval_ms * 1'000'000) {}

  // True when a line may be written now; then *suppressed is the number of lines
  // refused since the last one allowed.
  bool Allow(uint64_t* suppressed) {
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
    int64_t next = next_ns_.load(std::memory_order_relaxed);
    if (now_ns < next || !next_ns_.compare_exchange_strong(next, now_ns + interval_ns_)) {
      suppressed_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
    return true;
  }

 private:
  const int64_t interval_ns_;
  std::atomic<int64_t> next_ns_{0};
  std::atomic<uint64_t> suppressed_{0};
};

}  // namespace infera::router
