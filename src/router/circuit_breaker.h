// CircuitBreaker: per-worker failure gate (architecture §12).
//
// Closed: requests flow; `failure_threshold` consecutive failures (5xx answers,
// unreachable) open it. Open: no requests for `cooldown_ms`; then half-open: one
// probe request is let through; its success closes the breaker, its failure opens
// it again for another cooldown. A probe whose outcome is never reported (an
// exception skipped the report) holds the slot for at most `probe_lease_ms`: after
// that the next request takes the slot anew, so a lost report cannot keep the worker
// out of rotation forever. The router sets the lease to request timeout + cooldown,
// longer than any probe that ends on its own (the request timeout reports a failure).
//
// Time is passed in (monotonic ns), so tests drive it by hand.
// Thread-safety: none; the router calls it under its pick mutex.
#pragma once

#include <cstdint>

namespace infera::router {

class CircuitBreaker {
 public:
  enum class State : uint8_t { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

  // probe_lease_ms <= 0: a probe slot is held until its outcome is reported.
  CircuitBreaker(uint32_t failure_threshold, int64_t cooldown_ms, int64_t probe_lease_ms = 0)
      : threshold_(failure_threshold),
        cooldown_ns_(cooldown_ms * 1'000'000),
        probe_lease_ns_(probe_lease_ms * 1'000'000) {}

  // Whether a request may go to the worker now; in half-open state this admits
  // the single probe (the caller must report its outcome).
  bool Allow(int64_t now_ns) {
    switch (state_) {
      case State::kClosed:
        return true;
      case State::kOpen:
        if (now_ns < open_until_ns_) return false;
        state_ = State::kHalfOpen;
        TakeProbe(now_ns);
        return true;
      case State::kHalfOpen:
        if (ProbeHeld(now_ns)) return false;
        TakeProbe(now_ns);
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
        return !ProbeHeld(now_ns);
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
  void TakeProbe(int64_t now_ns) {
    probe_in_flight_ = true;
    probe_since_ns_ = now_ns;
  }
  bool ProbeHeld(int64_t now_ns) const {
    return probe_in_flight_ && (probe_lease_ns_ <= 0 || now_ns < probe_since_ns_ + probe_lease_ns_);
  }

  uint32_t threshold_;
  int64_t cooldown_ns_;
  int64_t probe_lease_ns_;
  State state_ = State::kClosed;
  uint32_t consecutive_failures_ = 0;
  int64_t open_until_ns_ = 0;
  bool probe_in_flight_ = false;
  int64_t probe_since_ns_ = 0;
};

}  // namespace infera::router
