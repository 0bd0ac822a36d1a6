// WorkerHealth: one worker's circuit breaker behind its own mutex.
//
// The breaker is the only mutable part of a worker in the fleet snapshot; giving it
// its own lock keeps outcome reports (any loop, after each exchange) off the pick
// mutex. Allow() — which takes the half-open probe slot — is called only by the
// PickPlanner under its pick mutex, right after the WouldAllow() filter of the same
// pick, so two picks cannot both take one probe slot; a report from another loop may
// land in between (the breaker opening under a request that was already admitted,
// as with any request in flight when it opens).
//
// The common case — closed, no failure counted — takes no lock: `healthy_` mirrors it
// (written under mu_, read without), so a pick and a success report on a healthy
// worker cost one atomic load each. A failure report that races a pick is the race
// above; a success that races a failure reads as the success coming first.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "router/plan/circuit_breaker.h"

namespace infera::router {

class WorkerHealth {
 public:
  explicit WorkerHealth(const BreakerOptions& options) : breaker_(options) {}
  WorkerHealth(const WorkerHealth&) = delete;
  WorkerHealth& operator=(const WorkerHealth&) = delete;

  bool WouldAllow(int64_t now_ns) const ABSL_LOCKS_EXCLUDED(mu_) {
    if (healthy_.load(std::memory_order_acquire)) return true;
    absl::MutexLock lock(&mu_);
    return breaker_.WouldAllow(now_ns);
  }
  bool Allow(int64_t now_ns) ABSL_LOCKS_EXCLUDED(mu_) {
    if (healthy_.load(std::memory_order_acquire)) return true;
    absl::MutexLock lock(&mu_);
    const bool allowed = breaker_.Allow(now_ns);
    Mirror();
    return allowed;
  }
  void OnSuccess() ABSL_LOCKS_EXCLUDED(mu_) {
    if (healthy_.load(std::memory_order_acquire)) return;  // nothing to reset
    absl::MutexLock lock(&mu_);
    breaker_.OnSuccess();
    Mirror();
  }
  // Returns the cooldown (ns) when this failure opened the breaker (from closed or
  // half-open), for the log line; 0 otherwise.
  int64_t OnFailure(int64_t now_ns) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const uint64_t trips = breaker_.trips();
    breaker_.OnFailure(now_ns);
    Mirror();
    return breaker_.trips() != trips ? breaker_.cooldown_ns() : 0;
  }
  void OnAbandoned() ABSL_LOCKS_EXCLUDED(mu_) {
    if (healthy_.load(std::memory_order_acquire)) return;  // closed: no probe slot held
    absl::MutexLock lock(&mu_);
    breaker_.OnAbandoned();
    Mirror();
  }
  CircuitBreaker::State state() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return breaker_.state();
  }
  uint64_t trips() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return breaker_.trips();
  }

 private:
  void Mirror() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    healthy_.store(
        breaker_.state() == CircuitBreaker::State::kClosed && breaker_.consecutive_failures() == 0,
        std::memory_order_release);
  }

  mutable absl::Mutex mu_;
  CircuitBreaker breaker_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> healthy_{true};  // breaker_ closed with no failure counted
};

}  // namespace infera::router
