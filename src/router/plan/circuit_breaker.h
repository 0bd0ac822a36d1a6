// CircuitBreaker: per-worker failure gate (architecture §12), with Infera's semantics
// (infera/router/breaker.py; doc/router.md "Circuit breaker").
//
// Closed: requests flow; `failure_threshold` consecutive failures (5xx answers,
// unreachable, no first byte in time) open it. Open: no requests for the current
// cooldown; then half-open: one probe request is let through; its success closes the
// breaker and resets the cooldown to `cooldown_ms`; its failure opens it again with the
// cooldown doubled, up to `max_cooldown_ms` (a worker wedged for minutes is not probed
// every few seconds forever). A failure reported while open (a request admitted
// before it opened) keeps it open for the current cooldown from now.
// failure_threshold 0 turns the breaker off: it always admits.
//
// A probe whose outcome is never reported (an exception skipped the report) holds the
// slot for at most `probe_lease_ms`: after that the next request takes the slot anew,
// so a lost report cannot keep the worker out of rotation forever. The router sets the
// lease to request timeout + max cooldown, longer than any probe that ends on its own
// (the request timeout reports a failure).
//
// Time is passed in (monotonic ns), so tests drive it by hand.
// Thread-safety: none; WorkerHealth wraps it in a mutex.
#pragma once

#include <algorithm>
#include <cstdint>

namespace infera::router {

struct BreakerOptions {
  uint32_t failure_threshold = 5;    // --breaker-failures / --breaker-failure-threshold; 0: off
  int64_t cooldown_ms = 10'000;      // --breaker-cooldown-ms / --breaker-cooldown-s
  int64_t max_cooldown_ms = 60'000;  // --breaker-max-cooldown-ms / -s; <= cooldown: no doubling
  int64_t probe_lease_ms = 0;        // <= 0: a probe slot is held until its outcome is reported
};

class CircuitBreaker {
 public:
  enum class State : uint8_t { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

  explicit CircuitBreaker(const BreakerOptions& options)
      : threshold_(options.failure_threshold),
        cooldown_ns_(options.cooldown_ms * 1'000'000),
        max_cooldown_ns_(std::max(options.max_cooldown_ms, options.cooldown_ms) * 1'000'000),
        probe_lease_ns_(options.probe_lease_ms * 1'000'000),
        next_cooldown_ns_(cooldown_ns_) {}

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
    next_cooldown_ns_ = cooldown_ns_;
  }
  void OnFailure(int64_t now_ns) {
    if (threshold_ == 0) return;  // off
    ++consecutive_failures_;
    if (state_ == State::kHalfOpen) {
      // The probe failed: the worker is still bad; back off further.
      next_cooldown_ns_ = std::min(next_cooldown_ns_ * 2, max_cooldown_ns_);
      Open(now_ns);
    } else if (consecutive_failures_ >= threshold_) {
      Open(now_ns);
    }
  }
  // The outcome of an admitted request is unknown (client went away): free the
  // probe slot without judging the worker.
  void OnAbandoned() { probe_in_flight_ = false; }

  State state() const { return state_; }
  uint32_t consecutive_failures() const { return consecutive_failures_; }
  // The cooldown the breaker is (or would next be) open for.
  int64_t cooldown_ns() const { return next_cooldown_ns_; }
  // Times it went from closed or half-open to open.
  uint64_t trips() const { return trips_; }

 private:
  void Open(int64_t now_ns) {
    if (state_ != State::kOpen) ++trips_;
    state_ = State::kOpen;
    open_until_ns_ = now_ns + next_cooldown_ns_;
    probe_in_flight_ = false;
  }
  void TakeProbe(int64_t now_ns) {
    probe_in_flight_ = true;
    probe_since_ns_ = now_ns;
  }
  bool ProbeHeld(int64_t now_ns) const {
    return probe_in_flight_ && (probe_lease_ns_ <= 0 || now_ns < probe_since_ns_ + probe_lease_ns_);
  }

  uint32_t threshold_;
  int64_t cooldown_ns_;
  int64_t max_cooldown_ns_;
  int64_t probe_lease_ns_;
  int64_t next_cooldown_ns_;
  State state_ = State::kClosed;
  uint32_t consecutive_failures_ = 0;
  int64_t open_until_ns_ = 0;
  bool probe_in_flight_ = false;
  int64_t probe_since_ns_ = 0;
  uint64_t trips_ = 0;
};

}  // namespace infera::router
