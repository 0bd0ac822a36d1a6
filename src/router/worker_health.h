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
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "router/circuit_breaker.h"

namespace infera::router {

class WorkerHealth {
 public:
  WorkerHealth(uint32_t failure_threshold, int64_t cooldown_ms)
      : breaker_(failure_threshold, cooldown_ms) {}
  WorkerHealth(const WorkerHealth&) = delete;
  WorkerHealth& operator=(const WorkerHealth&) = delete;

  bool WouldAllow(int64_t now_ns) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return breaker_.WouldAllow(now_ns);
  }
  bool Allow(int64_t now_ns) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return breaker_.Allow(now_ns);
  }
  void OnSuccess() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    breaker_.OnSuccess();
  }
  void OnFailure(int64_t now_ns) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    breaker_.OnFailure(now_ns);
  }
  void OnAbandoned() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    breaker_.OnAbandoned();
  }
  CircuitBreaker::State state() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return breaker_.state();
  }

 private:
  mutable absl::Mutex mu_;
  CircuitBreaker breaker_ ABSL_GUARDED_BY(mu_);
};

}  // namespace infera::router
