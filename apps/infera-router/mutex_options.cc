// absl::Mutex options the router sets before main() (doc/perf-router.md).
//
// Debian's Abseil is built without NDEBUG, so its Mutex runs deadlock detection on
// every Lock/Unlock: a lookup in a global graph under a global lock (GraphCycles),
// ~2.5k instructions per proxied request for the seven absl::Mutex sections of the
// request path, and one more lock all loops contend for. A release build of the
// router turns it off, as Abseil's own release builds do; debug and sanitizer builds
// keep it.
#include "absl/synchronization/mutex.h"

namespace {

struct MutexOptions {
  MutexOptions() {
#ifdef NDEBUG
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  }
};

const MutexOptions mutex_options;

}  // namespace
