// SharedKvIndex: the router's core::KvIndex behind its reader/writer lock.
//
// The router owns one; every KvEventSource (ZMQ today, NATS next) writes into it, and
// the pick reads it. Readers hold the lock shared for one request's matching;
// writers (a source applying one batch, a target added or removed) hold it
// exclusively. The lock has writer priority (writer_priority_mutex.h), so a stream of
// picks cannot starve event application.
//
// Example:
//   SharedKvIndex index;
//   size_t blocks = index.WithIndex([&](const core::KvIndex& i) { return i.BlockCount(t); });
//   index.WithWrite([&](core::KvIndex& i) { i.ApplyCleared(t); });
//
// Thread-safety: every method may be called from any thread. Not re-entrant: the
// callbacks must not call back into the same SharedKvIndex.
#pragma once

#include <mutex>
#include <shared_mutex>

#include "core/kv_index.h"
#include "events/writer_priority_mutex.h"

namespace infera::events {

class SharedKvIndex {
 public:
  SharedKvIndex() = default;
  SharedKvIndex(const SharedKvIndex&) = delete;
  SharedKvIndex& operator=(const SharedKvIndex&) = delete;

  // Runs f(const core::KvIndex&) under the shared lock and returns its result.
  template <class F>
  auto WithIndex(F&& f) const {
    ReaderLock lock(mu_);
    return f(static_cast<const core::KvIndex&>(index_));
  }
  // Runs f(core::KvIndex&) under the exclusive lock and returns its result.
  template <class F>
  auto WithWrite(F&& f) {
    WriterLock lock(mu_);
    return f(index_);
  }

  // For a writer that keeps state guarded by the same lock (KvEventIngestor's
  // per-target `alive` flag): the lock and the index itself. REQUIRES: every use of
  // index() holds mutex(), shared for reads, exclusive for writes.
  WriterPriorityMutex& mutex() const ABSL_LOCK_RETURNED(mu_) { return mu_; }
  core::KvIndex& index() { return index_; }
  const core::KvIndex& index() const { return index_; }

 private:
  mutable WriterPriorityMutex mu_;
  core::KvIndex index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace infera::events
