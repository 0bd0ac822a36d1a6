// EtcdDiscovery: workers from etcd v3 (architecture §11, doc/discovery.md).
//
//   EtcdDiscoveryOptions options;
//   options.client.endpoints = "127.0.0.1:2379";  // --etcd-endpoint
//   options.prefix = "/infera/workers/";          // --etcd-prefix
//   EtcdDiscovery discovery(options);
//   discovery.Start(callbacks);  // workers are reported from a background thread
//
// Algorithm (one background thread):
//   1. range snapshot of every key under the prefix → WorkerTable::ReplaceAll,
//      which reports only the difference to what was already known;
//   2. watch the prefix from snapshot revision + 1; each put/delete is applied in
//      order (a delete, e.g. lease expiry or revoke, removes the worker);
//   3. on any failure (etcd down or restarted, stream idle past
//      watch_idle_timeout_ms, watch cancelled because the revision was compacted)
//      go back to 1 — after a backoff delay unless it was a compaction. Workers
//      stay as they are while etcd is unreachable.
// Undecodable values are logged and treated as absent.
//
// Thread-safety: see discovery.h (callbacks on the discovery thread). Counters are
// safe to read from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "base/mutex.h"
#include "discovery/discovery.h"
#include "discovery/etcd_client.h"

namespace infera::discovery {

struct EtcdDiscoveryOptions {
  EtcdClientOptions client;
  std::string prefix = "/infera/workers/";
  int64_t backoff_initial_ms = 100;
  int64_t backoff_max_ms = 5000;
  uint64_t backoff_seed = 1;
};

class EtcdDiscovery final : public Discovery {
 public:
  explicit EtcdDiscovery(EtcdDiscoveryOptions options);
  ~EtcdDiscovery() override;

  // InvalidArgument for a bad endpoint list or prefix; never fails because etcd
  // is down (that is retried).
  absl::Status Start(DiscoveryCallbacks callbacks) override;
  void Stop() override;

  // Completed range snapshots (the first one means "initial state reported").
  int64_t snapshot_count() const { return snapshot_count_.load(); }
  // Failed range or watch attempts.
  int64_t error_count() const { return error_count_.load(); }
  // Values under the prefix that were not valid worker records.
  int64_t rejected_record_count() const { return rejected_record_count_.load(); }

 private:
  void Run(DiscoveryCallbacks callbacks);
  // Sleeps up to delay_ms unless Stop() comes first; returns false on Stop().
  bool SleepMs(int64_t delay_ms);

  EtcdDiscoveryOptions options_;
  std::unique_ptr<EtcdClient> client_;
  std::thread thread_;
  base::Mutex mu_;
  base::CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> snapshot_count_{0};
  std::atomic<int64_t> error_count_{0};
  std::atomic<int64_t> rejected_record_count_{0};
};

}  // namespace infera::discovery
