// CircuitBreaker: per-worker failure gate (architecture §12).
//
// Closed: requests flow; `failure_threshold` consecutive failures (5xx answers,
// unreachable) open it. Open: no requests for `cooldown_ms`; then half-open: one
// probe request is let through; its success closes the breaker, its failure opens
// it again for another cooldown.
//
// Time is passed in (monotonic ns), so tests drive it by hand.
// Thread-safety: none; the router calls it under its pick mutex.
#pragma once

#include <cstdint>

namespace infera::router {

class CircuitBreaker {
 public:
  enum class State : uint8_t { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

  CircuitBreaker(uint32_t failure_threshold, int64_t cooldown_ms)
      : threshold_(failure_threshold), cooldown_ns_(cooldown_ms * 1'000'000) {}

  // Whether a request may go to the worker now; in half-open state this admits
  // the single probe (the caller must report its outcome).
  bool Allow(int64_t now_ns) {
    switch (state_) {
      case State::kClosed:
        return true;
      case State::kOpen:
        if (now_ns < open_until_ns_) return false;
        state_ = State::kHalfOpen;
        probe_in_flight_ = true;
        return true;
      case State::kHalfOpen:
        if (probe_in_flight_) return false;
        probe_in_flight_ = true;
        return true;
    }
    return true;
  }
  // Whether Allow() would admit a request now (does not take the probe slot).
  bool WouldAllow(int64_t now_ns) const {
    switch (state_) {
      case State::kClosed:
        return true;
      case State::kOpen:
        return now_ns >= open_until_ns_;
      case State::kHalfOpen:
        return !probe_in_flight_;
    }
    return true;
  }
  void OnSuccess() {
    state_ = State::kClosed;
    consecutive_failures_ = 0;
    probe_in_flight_ = false;
  }
  void OnFailure(int64_t now_ns) {
    ++consecutive_failures_;
    if (state_ == State::kHalfOpen || consecutive_failures_ >= threshold_) {
      state_ = State::kOpen;
      open_until_ns_ = now_ns + cooldown_ns_;
      probe_in_flight_ = false;
    }
  }
  // The outcome of an admitted request is unknown (client went away): free the
  // probe slot without judging the worker.
  void OnAbandoned() { probe_in_flight_ = false; }

  State state() const { return state_; }
  uint32_t consecutive_failures() const { return consecutive_failures_; }

 private:
  uint32_t threshold_;
  int64_t cooldown_ns_;
  State state_ = State::kClosed;
  uint32_t consecutive_failures_ = 0;
  int64_t open_until_ns_ = 0;
  bool probe_in_flight_ = false;
};

}  // namespace infera::router
