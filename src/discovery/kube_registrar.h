// KubeRegistrar: keeps one worker record in its own Pod's annotation
// `infera.amd.com/worker-info` (doc/discovery.md §3), as Infera's
// K8sRegistrationClient does (infera/common/registration_k8s.py). Used by
// `infera-register --k8s`, the sidecar beside a real engine in the same Pod.
//
//   KubeRegistrarOptions options;
//   options.client = *KubeClientOptions::InCluster(kServiceAccountDir, getenv);
//   options.namespace_name = "inference";  options.pod_name = "vllm-0";  // downward API
//   auto registrar = KubeRegistrar::Create(record, options);
//   (*registrar)->Start();   ...   (*registrar)->Stop();  // clears the annotation
//
// Behaviour (one background thread): merge-patch the annotation to the record's JSON,
// retrying with backoff (100 ms → 2 s) until the API server takes it; then re-patch
// every refresh_s (30 s: it heals an annotation something stripped). Pod lifetime is
// the lease: a deleted Pod takes the record with it, and the router drops a Pod the
// moment it has a deletionTimestamp. Stop() ends the loop and removes the annotation
// (a `null` merge patch, bounded by the client's request timeout), which is how a
// worker signalled without its Pod being deleted (a container restart, a node
// shutdown) leaves routing before it drains.
//
// Thread-safety: Start/Stop from one owner thread; the accessors from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "discovery/kube_client.h"
#include "discovery/worker_record.h"

namespace infera::discovery {

struct KubeRegistrarOptions {
  KubeClientOptions client;
  std::string namespace_name;  // POD_NAMESPACE, else the service account's
  std::string pod_name;        // POD_NAME (downward API)
  int64_t refresh_s = 30;
  int64_t backoff_initial_ms = 100;
  int64_t backoff_max_ms = 2000;
  uint64_t backoff_seed = 1;
};

class KubeRegistrar {
 public:
  // InvalidArgument without a Pod name or namespace, a bad server URL, refresh < 1 s.
  static absl::StatusOr<std::unique_ptr<KubeRegistrar>> Create(WorkerRecord record,
                                                               KubeRegistrarOptions options);
  ~KubeRegistrar();
  void Start();
  // Stops the loop and removes the annotation; the removal's status.
  absl::Status Stop();

  int64_t patch_count() const { return patch_count_.load(); }  // successful writes
  bool registered() const { return patch_count_.load() > 0; }

 private:
  KubeRegistrar(WorkerRecord record, KubeRegistrarOptions options,
                std::unique_ptr<KubeClient> client);
  void Run();
  bool SleepMs(int64_t delay_ms);

  const std::string record_json_;
  const std::string worker_id_;
  KubeRegistrarOptions options_;
  std::unique_ptr<KubeClient> client_;
  std::thread thread_;
  base::Mutex mu_;
  base::CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> patch_count_{0};
};

}  // namespace infera::discovery
