// TestClock: a core::Clock the test moves by hand and other threads read (an
// ingestion thread, a router loop). ManualClock (core/clock.h) is for one thread.
//
// Thread-safety: NowNs and Advance from any thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/clock.h"

namespace infera::testing {

class SharedManualClock final : public core::Clock {
 public:
  explicit SharedManualClock(int64_t now_ns = 1'000'000'000) : now_ns_(now_ns) {}
  int64_t NowNs() const override { return now_ns_.load(); }
  void Advance(int64_t delta_ns) { now_ns_.fetch_add(delta_ns); }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace infera::testing
