// Mutex, MutexLock, CondVar: std::mutex and std::condition_variable with Abseil's
// thread-safety annotations, so clang's -Wthread-safety checks every ABSL_GUARDED_BY
// member (doc/build.md "Thread-safety analysis").
//
// libstdc++'s std::mutex and std::lock_guard carry no capability attributes: clang
// cannot see which lock a std::lock_guard holds, so members guarded by a std::mutex go
// unchecked. These wrappers are the same lock (a std::mutex inside, no extra state), with
// the attributes; absl::Mutex is the other checked lock of the tree (src/router).
//
// Example:
//   class Counter {
//    public:
//     void Add() { base::MutexLock lock(mu_); ++n_; }
//     bool WaitNonZero(int64_t ms) {
//       base::MutexLock lock(mu_);
//       return cv_.WaitFor(mu_, ms, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return n_ > 0; });
//     }
//    private:
//     base::Mutex mu_;
//     base::CondVar cv_;
//     int n_ ABSL_GUARDED_BY(mu_) = 0;
//   };
// A predicate that reads guarded state is a lambda of its own for the analysis: mark it
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) (it runs with the lock held).
//
// Thread-safety: that is their job. Not recursive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace infera::base {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// std::condition_variable over a Mutex the caller holds.
class CondVar {
 public:
  void Wait(Mutex& mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Adopted lock(mu);
    cv_.wait(lock.lock);
  }
  // False when `deadline` passed first (spurious wake-ups return true: re-check).
  template <class Clock, class Duration>
  bool WaitUntil(Mutex& mu, std::chrono::time_point<Clock, Duration> deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Adopted lock(mu);
    return cv_.wait_until(lock.lock, deadline) == std::cv_status::no_timeout;
  }
  // Waits until pred() or timeout_ms passed; returns pred(). pred runs with mu held.
  template <class Pred>
  bool WaitFor(Mutex& mu, int64_t timeout_ms, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Adopted lock(mu);
    return cv_.wait_for(lock.lock, std::chrono::milliseconds(timeout_ms), std::move(pred));
  }
  template <class Pred>
  void Wait(Mutex& mu, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Adopted lock(mu);
    cv_.wait(lock.lock, std::move(pred));
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  // The caller's lock as a std::unique_lock for the wait, given back (still held) after.
  struct Adopted {
    explicit Adopted(Mutex& mu) : lock(mu.mu_, std::adopt_lock) {}
    ~Adopted() { lock.release(); }
    std::unique_lock<std::mutex> lock;
  };
  std::condition_variable cv_;
};

}  // namespace infera::base
