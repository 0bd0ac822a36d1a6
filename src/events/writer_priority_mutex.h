// WriterPriorityMutex: a reader/writer lock whose waiting writer blocks new readers.
//
// std::shared_mutex on glibc prefers readers: request threads that keep the lock
// shared back to back can starve KV-event ingestion for as long as they keep coming.
// With writer priority a batch waits at most for the readers already inside; readers
// then wait at most for one batch's application. Meets the Lockable and SharedLockable
// requirements (use with std::unique_lock / std::shared_lock).
//
// Thread-safety: that is its job. Not recursive.
#pragma once

#include <pthread.h>

#include <cstdlib>

namespace infera::events {

class WriterPriorityMutex {
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

  void lock() { Check(pthread_rwlock_wrlock(&lock_)); }
  bool try_lock() { return pthread_rwlock_trywrlock(&lock_) == 0; }
  void unlock() { Check(pthread_rwlock_unlock(&lock_)); }
  void lock_shared() { Check(pthread_rwlock_rdlock(&lock_)); }
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&lock_) == 0; }
  void unlock_shared() { Check(pthread_rwlock_unlock(&lock_)); }

 private:
  // A failing lock call is a bug (deadlock, unlocked unlock): crash loudly.
  static void Check(int rc) {
    if (rc != 0) std::abort();
  }
  pthread_rwlock_t lock_;
};

}  // namespace infera::events
