// WaitFor: the tests' one bounded polling helper (never a fixed sleep, never a
// timing assertion).
//
//   ASSERT_TRUE(infera::testing::WaitFor([&] { return server.ready(); }));
//   WaitFor([&] { return child.exited(); }, /*timeout_ms=*/5000, /*poll_ms=*/20);
//
// Polls `condition` every poll_ms until it holds or timeout_ms has passed (a bound
// for "eventually" on a loaded machine); returns its last value.
// Thread-safety: runs on the calling thread; `condition` must be safe to call there.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace infera::testing {

template <typename Condition>
bool WaitFor(Condition condition, int64_t timeout_ms = 30'000, int64_t poll_ms = 5) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return condition();
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return true;
}

}  // namespace infera::testing
