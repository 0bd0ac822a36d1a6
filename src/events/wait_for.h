// WaitFor: the tests' bounded polling for a condition (never a fixed sleep).
#pragma once

#include <chrono>
#include <thread>

namespace infera::events {

// Polls `cond` every 5 ms until it holds or `limit` has passed (a bound, not a timing
// assertion); returns its last value.
template <class F>
bool WaitFor(F cond, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

}  // namespace infera::events
