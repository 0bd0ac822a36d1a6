// The compile-fail test of the thread-safety stage (scripts/thread-safety, doc/build.md
// "Thread-safety analysis"): each marked line touches guarded state without its lock,
// and clang with -Wthread-safety -Werror must reject it with the diagnostic named in
// its "expected" comment (clang -verify checks they match exactly). Never built
// into anything.
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/mutex.h"

namespace infera {

class Guarded {
 public:
  void Unguarded() {
    ++count_;  // expected-error {{writing variable 'count_' requires holding mutex 'mu_' exclusively}}
  }
  int UnguardedRead() const {
    return count_;  // expected-error {{reading variable 'count_' requires holding mutex 'mu_'}}
  }
  void Guarded_() {
    base::MutexLock lock(mu_);
    ++count_;  // fine: the lock is held
    Bump();
  }
  void CallsWithoutLock() {
    Bump();  // expected-error {{calling function 'Bump' requires holding mutex 'mu_' exclusively}}
  }
  bool WaitsUnannotated() {
    base::MutexLock lock(mu_);
    // The predicate is a function of its own: unmarked, it is flagged.
    return cv_.WaitFor(mu_, 1, [&] {
      return count_ > 0;  // expected-error {{reading variable 'count_' requires holding mutex 'mu_'}}
    });
  }
  bool WaitsAnnotated() {
    base::MutexLock lock(mu_);
    return cv_.WaitFor(mu_, 1, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ > 0; });
  }

 private:
  void Bump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++count_; }

  mutable base::Mutex mu_;
  base::CondVar cv_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

// absl::Mutex, the lock of src/router, is checked the same way.
class AbslGuarded {
 public:
  void Unguarded() {
    value_ = 1;  // expected-error {{writing variable 'value_' requires holding mutex 'mu_' exclusively}}
  }
  void Guarded() {
    absl::MutexLock lock(&mu_);
    value_ = 2;
  }

 private:
  absl::Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace infera
