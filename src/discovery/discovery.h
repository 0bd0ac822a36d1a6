// Discovery: the set of workers the router may route to, and how it changes.
//
// A Discovery backend reports workers appearing, changing and vanishing through
// callbacks. The router turns an added record into targets (one per dp rank), an
// update into "replace the record" and a removal into "drop the worker and all its
// index and load state".
//
//   auto discovery = std::make_unique<EtcdDiscovery>(options);
//   DiscoveryCallbacks callbacks;  // (assign members: -Wmissing-field-initializers)
//   callbacks.on_added = [&](const WorkerRecord& r) { ... };
//   callbacks.on_updated = ...;  callbacks.on_removed = ...;
//   discovery->Start(std::move(callbacks));
//   ...
//   discovery->Stop();
//
// Contract for every backend:
//   - worker ids are unique among the workers reported present; on_updated and
//     on_removed only name a worker previously reported by on_added and not
//     removed since; callbacks for one backend never run concurrently and arrive
//     in the order the changes were observed.
//   - callbacks run on the backend's own thread (StaticDiscovery: inside Start);
//     they must not call Stop() and should return quickly.
//   - after Stop() returns no callback runs anymore.
// Thread-safety: Start and Stop are called from one owner thread, Start at most once.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "discovery/worker_record.h"

namespace infera::discovery {

struct DiscoveryCallbacks {
  std::function<void(const WorkerRecord&)> on_added;
  // The record of an already known worker_id changed (new value is passed).
  std::function<void(const WorkerRecord&)> on_updated;
  std::function<void(const std::string& worker_id)> on_removed;
};

class Discovery {
 public:
  virtual ~Discovery() = default;
  // Begins reporting. An error means the configuration is unusable; transient
  // backend failures (etcd down) are retried in the background instead.
  virtual absl::Status Start(DiscoveryCallbacks callbacks) = 0;
  // Stops reporting and joins any thread; idempotent.
  virtual void Stop() = 0;
};

}  // namespace infera::discovery
