// SteadyClock: the real monotonic clock behind core::Clock, for the online router.
// (src/core never reads a clock; the edges inject this one, tests a ManualClock.)
//
// Thread-safety: stateless.
#pragma once

#include <chrono>

#include "core/clock.h"

namespace infera::router {

class SteadyClock final : public core::Clock {
 public:
  int64_t NowNs() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace infera::router
