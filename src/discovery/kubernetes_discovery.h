// KubernetesDiscovery: workers from the Pods of a namespace (doc/discovery.md §3), as
// Infera's `--discovery-backend kubernetes` finds them (infera/common/discovery_k8s.py,
// rust/router/src/discovery_k8s.rs): each worker writes its record (the etcd schema)
// into its own Pod's annotation `infera.amd.com/worker-info`; the router lists and
// watches the Pods matching a label selector through the API server.
//
//   KubernetesDiscoveryOptions options;
//   options.client = *KubeClientOptions::InCluster(kServiceAccountDir, getenv);
//   options.namespace_name = "inference";
//   options.label_selector = "app=vllm";  // --k8s-label-selector (required)
//   KubernetesDiscovery discovery(options);
//   discovery.Start(callbacks);
//
// A Pod is a worker while it is Running, has no deletionTimestamp (a Pod being
// deleted leaves routing the moment the API server stamps it, before its containers
// are even signalled) and carries the annotation; its key is the Pod's name (so a
// DELETED event, which names the Pod, maps back to the worker). Algorithm, one thread:
//   1. list the Pods → WorkerTable::ReplaceAll (only the difference is reported; a
//      Pod missing from a full list is gone even if its DELETED event was lost);
//   2. watch from the list's resourceVersion with bookmarks; each event moves the
//      resourceVersion on (a BOOKMARK only that) and is applied in order;
//   3. the server ending the watch cleanly (timeoutSeconds) → watch again from the
//      last resourceVersion; `410 Gone` (an ERROR event or the HTTP status: the
//      version was compacted away) → 1 at once; any other failure → 1 after a backoff
//      (100 ms → 5 s). Workers stay as they are while the API server is unreachable.
// An annotation that is not a valid record is logged and counts as no worker.
//
// Logs go to the `discovery_k8s` logger (RUST_LOG target infera_router::discovery_k8s).
// Thread-safety: see discovery.h. Counters may be read from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "base/mutex.h"
#include "discovery/discovery.h"
#include "discovery/kube_client.h"

namespace infera::discovery {

struct KubernetesDiscoveryOptions {
  KubeClientOptions client;
  std::string namespace_name = "default";
  std::string label_selector;
  int64_t backoff_initial_ms = 100;
  int64_t backoff_max_ms = 5000;
  uint64_t backoff_seed = 1;
};

class KubernetesDiscovery final : public Discovery {
 public:
  explicit KubernetesDiscovery(KubernetesDiscoveryOptions options);
  ~KubernetesDiscovery() override;

  // InvalidArgument for an empty selector (it would match every Pod of the
  // namespace) or a bad server URL; never fails because the API server is down.
  absl::Status Start(DiscoveryCallbacks callbacks) override;
  void Stop() override;

  int64_t list_count() const { return list_count_.load(); }  // completed lists
  int64_t gone_count() const { return gone_count_.load(); }  // 410 Gone relists
  int64_t bookmark_count() const { return bookmark_count_.load(); }
  int64_t error_count() const { return error_count_.load(); }  // failed list/watch
  int64_t rejected_record_count() const { return rejected_record_count_.load(); }

 private:
  void Run(DiscoveryCallbacks callbacks);
  bool SleepMs(int64_t delay_ms);

  KubernetesDiscoveryOptions options_;
  std::unique_ptr<KubeClient> client_;
  std::thread thread_;
  base::Mutex mu_;
  base::CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> list_count_{0}, gone_count_{0}, bookmark_count_{0}, error_count_{0},
      rejected_record_count_{0};
};

}  // namespace infera::discovery
