// EtcdRegistrar: keeps one worker record registered in etcd under a lease
// (architecture §11, doc/discovery.md). Used by infera-register (the sidecar of a
// real vLLM/SGLang worker) and by infera-mock-engine.
//
//   EtcdRegistrarOptions options;
//   options.client.endpoints = "127.0.0.1:2379";
//   auto registrar = EtcdRegistrar::Create(record, options);  // StatusOr<unique_ptr<>>
//   (*registrar)->Start();
//   ...
//   (*registrar)->Stop();  // revokes the lease: the record vanishes at once
//
// Behaviour (one background thread):
//   - grant a lease of lease_ttl_s, put `<prefix><worker_id>` = the record JSON with
//     that lease; on failure retry with backoff;
//   - every keepalive_interval_s renew the lease; when a renewal fails for a network
//     reason, retry with backoff (the lease survives until its TTL); when etcd says
//     the lease is gone (expired while etcd or the network was away, or etcd lost
//     its data), grant a new lease and put the record again;
//   - Stop() ends the loop and revokes the lease (bounded by the request timeout);
//     if the process dies instead, the record vanishes when the TTL runs out.
//
// Thread-safety: Start/Stop from one owner thread; the accessors from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "discovery/etcd_client.h"
#include "discovery/worker_record.h"

namespace infera::discovery {

struct EtcdRegistrarOptions {
  EtcdClientOptions client;
  std::string prefix = "/infera/workers/";
  int64_t lease_ttl_s = 30;
  int64_t keepalive_interval_s = 10;
  int64_t backoff_initial_ms = 100;
  int64_t backoff_max_ms = 2000;
  uint64_t backoff_seed = 1;
};

class EtcdRegistrar {
 public:
  // InvalidArgument for a bad endpoint list, an empty prefix, a TTL below 2 s, or a
  // keepalive interval not shorter than the TTL.
  static absl::StatusOr<std::unique_ptr<EtcdRegistrar>> Create(WorkerRecord record,
                                                               EtcdRegistrarOptions options);
  ~EtcdRegistrar();

  void Start();
  // Stops keeping alive and revokes the current lease; idempotent. Returns the
  // revoke's status (OK when there was nothing to revoke).
  absl::Status Stop();

  // Blocks until the record is registered (or timeout / Stop()); true if registered.
  bool WaitUntilRegistered(int64_t timeout_ms);
  bool registered() const;
  int64_t lease_id() const;
  // Successful grant+put rounds (1 after the first registration; more after the
  // lease was lost and re-registered).
  int64_t registration_count() const { return registration_count_.load(); }
  const std::string& key() const { return key_; }
  const std::string& value() const { return value_; }

 private:
  EtcdRegistrar(WorkerRecord record, EtcdRegistrarOptions options,
                std::unique_ptr<EtcdClient> client);
  void Run();
  bool SleepMs(int64_t delay_ms);  // false on Stop()
  absl::Status Register();

  const EtcdRegistrarOptions options_;
  const std::string key_;
  const std::string value_;
  std::unique_ptr<EtcdClient> client_;
  std::thread thread_;
  mutable base::Mutex mu_;
  base::CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // Stop() finished
  int64_t lease_id_ ABSL_GUARDED_BY(mu_) = 0;  // 0 = not registered
  std::atomic<int64_t> registration_count_{0};
};

}  // namespace infera::discovery
