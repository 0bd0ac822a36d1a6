// WorkerLiveness: a worker's active health-check verdict (doc/router.md "Active
// health checks"), and the attempts waiting on the worker for an answer head.
//
// HealthChecker probes each worker's health endpoint and Record()s the outcome here.
// `unhealthy_after` consecutive failed probes take the worker out of picks;
// `healthy_after` consecutive passed probes bring it back. A new worker starts
// healthy (routable as a cold worker until a probe says otherwise).
//
// An attempt sent to the worker registers a waiter (AttemptWatch) until its answer's
// head arrives; when the verdict flips to unhealthy every waiter's callback runs
// (each posts to its own loop), so requests stuck on a frozen engine fail over
// before anything reached their client instead of waiting for the request deadline.
//
// healthy() is what the pick path reads: one atomic load, no lock.
// Thread-safety: every method may be called from any thread; callbacks run outside
// the lock.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace infera::router {

struct HealthCheckThresholds {
  uint32_t unhealthy_after = 3;  // --health-check-failures
  uint32_t healthy_after = 2;    // --health-check-successes
};

// The pure verdict: consecutive outcomes against the thresholds.
// Thread-safety: none.
class HealthVerdict {
 public:
  explicit HealthVerdict(HealthCheckThresholds t) : t_(t) {}

  // Records one probe; true when the verdict flipped.
  bool Record(bool passed) {
    ++checks_;
    if (passed) {
      consecutive_failures_ = 0;
      ++consecutive_successes_;
      if (!healthy_ && consecutive_successes_ >= std::max<uint32_t>(1, t_.healthy_after)) {
        healthy_ = true;
        return true;
      }
      return false;
    }
    consecutive_successes_ = 0;
    ++consecutive_failures_;
    if (healthy_ && consecutive_failures_ >= std::max<uint32_t>(1, t_.unhealthy_after)) {
      healthy_ = false;
      return true;
    }
    return false;
  }
  bool healthy() const { return healthy_; }
  uint32_t consecutive_failures() const { return consecutive_failures_; }
  uint32_t consecutive_successes() const { return consecutive_successes_; }
  uint64_t checks() const { return checks_; }

 private:
  HealthCheckThresholds t_;
  bool healthy_ = true;
  uint32_t consecutive_failures_ = 0;
  uint32_t consecutive_successes_ = 0;
  uint64_t checks_ = 0;
};

class WorkerLiveness {
 public:
  explicit WorkerLiveness(HealthCheckThresholds t) : verdict_(t) {}
  WorkerLiveness(const WorkerLiveness&) = delete;
  WorkerLiveness& operator=(const WorkerLiveness&) = delete;

  bool healthy() const { return healthy_.load(std::memory_order_acquire); }

  struct Recorded {
    bool flipped = false;
    bool healthy = true;
    uint32_t consecutive = 0;  // consecutive probes with this outcome
    size_t waiters = 0;        // attempts told to fail over (flip to unhealthy)
  };
  // One probe's outcome at `now_ns` (the router's clock); `error` says why it failed
  // ("" when it passed).
  Recorded Record(bool passed, std::string error, int64_t now_ns) ABSL_LOCKS_EXCLUDED(mu_) {
    Recorded r;
    std::vector<std::function<void()>> fire;
    {
      absl::MutexLock lock(&mu_);
      r.flipped = verdict_.Record(passed);
      r.healthy = verdict_.healthy();
      r.consecutive = passed ? verdict_.consecutive_successes() : verdict_.consecutive_failures();
      last_check_ns_ = now_ns;
      if (!passed) last_error_ = std::move(error);
      healthy_.store(r.healthy, std::memory_order_release);
      if (r.flipped && !r.healthy) {
        for (auto& [id, fn] : waiters_) fire.push_back(fn);
      }
    }
    r.waiters = fire.size();
    for (auto& fn : fire) fn();
    return r;
  }

  struct Snapshot {
    bool healthy = true;
    uint32_t consecutive_failures = 0;
    uint32_t consecutive_successes = 0;
    uint64_t checks = 0;
    std::string last_error;  // of the last failed probe ("" if none failed yet)
    int64_t last_check_ns = 0;
  };
  Snapshot snapshot() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return {verdict_.healthy(),
            verdict_.consecutive_failures(),
            verdict_.consecutive_successes(),
            verdict_.checks(),
            last_error_,
            last_check_ns_};
  }

  // An attempt waiting for its answer's head; `on_unhealthy` runs (on the recording
  // thread, so it should only post to the attempt's loop) if the verdict flips to
  // unhealthy before RemoveWaiter. Returns the waiter's id.
  uint64_t AddWaiter(std::function<void()> on_unhealthy) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const uint64_t id = ++next_waiter_;
    waiters_.emplace(id, std::move(on_unhealthy));
    return id;
  }
  void RemoveWaiter(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    waiters_.erase(id);
  }
  size_t waiters() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return waiters_.size();
  }

 private:
  mutable absl::Mutex mu_;
  HealthVerdict verdict_ ABSL_GUARDED_BY(mu_);
  int64_t last_check_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::function<void()>> waiters_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> healthy_{true};
};

}  // namespace infera::router
