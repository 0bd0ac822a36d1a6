// WriterPriorityMutex: a reader/writer lock whose waiting writer blocks new readers.
//
// std::shared_mutex on glibc prefers readers: request threads that keep the lock
// shared back to back can starve KV-event ingestion for as long as they keep coming.
// With writer priority a batch waits at most for the readers already inside; readers
// then wait at most for one batch's application. Meets the Lockable and SharedLockable
// requirements (std::unique_lock / std::shared_lock take it), and is a capability for
// clang's thread-safety analysis: members ABSL_GUARDED_BY it are checked where the
// lock is taken with WriterLock or ReaderLock below (doc/build.md "Thread-safety
// analysis"); a std::unique_lock / std::shared_lock is invisible to the analysis.
//
// Thread-safety: that is its job. Not recursive.
#pragma once

#include <pthread.h>

#include <cstdlib>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace infera::events {

class ABSL_LOCKABLE WriterPriorityMutex {
 public:
  WriterPriorityMutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (pthread_rwlock_init(&lock_, &attr) != 0) std::abort();
    pthread_rwlockattr_destroy(&attr);
  }
  ~WriterPriorityMutex() { pthread_rwlock_destroy(&lock_); }
  WriterPriorityMutex(const WriterPriorityMutex&) = delete;
  WriterPriorityMutex& operator=(const WriterPriorityMutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { Check(pthread_rwlock_wrlock(&lock_)); }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return pthread_rwlock_trywrlock(&lock_) == 0;
  }
  void unlock() ABSL_UNLOCK_FUNCTION() { Check(pthread_rwlock_unlock(&lock_)); }
  void lock_shared() ABSL_SHARED_LOCK_FUNCTION() { Check(pthread_rwlock_rdlock(&lock_)); }
  bool try_lock_shared() ABSL_SHARED_TRYLOCK_FUNCTION(true) {
    return pthread_rwlock_tryrdlock(&lock_) == 0;
  }
  void unlock_shared() ABSL_UNLOCK_FUNCTION() { Check(pthread_rwlock_unlock(&lock_)); }

  // The writers' turn, for a writer that prepares under the shared lock before it
  // writes (StreamApplier: a growth plan, then a slice): it holds the turn for the whole
  // step. With several writers (sharded ingestion, doc/kv-events.md "Sharded
  // ingestion") only one prepares at a time (two would both rebuild the same shared
  // table, one in vain, and hold both in memory), and a writer waits for its turn here,
  // not on the exclusive lock, where writer priority would hold back every new reader
  // for as long as another writer's preparation takes. Readers never take it.
  std::mutex& writer_turn() { return writer_turn_; }

 private:
  // A failing lock call is a bug (deadlock, unlocked unlock): crash loudly.
  static void Check(int rc) {
    if (rc != 0) std::abort();
  }
  pthread_rwlock_t lock_;
  std::mutex writer_turn_;
};

// Holds `mu` exclusively for its scope.
class ABSL_SCOPED_LOCKABLE WriterLock {
 public:
  explicit WriterLock(WriterPriorityMutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_.lock();
  }
  ~WriterLock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  WriterPriorityMutex& mu_;
};

// Holds `mu` shared for its scope.
class ABSL_SCOPED_LOCKABLE ReaderLock {
 public:
  explicit ReaderLock(WriterPriorityMutex& mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_.lock_shared();
  }
  ~ReaderLock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  WriterPriorityMutex& mu_;
};

}  // namespace infera::events
