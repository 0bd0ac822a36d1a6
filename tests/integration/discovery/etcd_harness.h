// EtcdHarness: a real etcd server (Debian's /usr/bin/etcd, or $INFERA_ETCD_BIN) for
// integration tests, on free ports with a temporary data directory.
//
//   EtcdHarness etcd;
//   ASSERT_TRUE(etcd.Start().ok());         // returns once the gateway answers
//   options.client.endpoints = etcd.endpoint();  // "127.0.0.1:<port>"
//   etcd.Kill();  etcd.Start();             // a restart keeps ports and data
//   etcd.WipeData();                        // (while stopped) etcd comes back empty
//
// Logs go to <data dir>/../etcd.log. The destructor kills etcd and deletes the
// directory. Thread-safety: one thread.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "child_process.h"

namespace infera::testing {

class EtcdHarness {
 public:
  EtcdHarness();
  ~EtcdHarness();

  // Starts etcd (again) and waits up to timeout_ms for /v3/kv/range to answer.
  absl::Status Start(int64_t timeout_ms = 30000);
  // Graceful stop (SIGTERM) or crash (SIGKILL); both keep the data directory.
  void Stop();
  void Kill();
  // Deletes the data directory. REQUIRES: stopped.
  void WipeData();

  bool running() const { return process_ != nullptr && process_->running(); }
  std::string endpoint() const;  // "127.0.0.1:<client port>"
  int client_port() const { return client_port_; }
  const std::string& work_dir() const { return work_dir_; }

 private:
  std::string work_dir_;
  int client_port_ = -1;
  int peer_port_ = -1;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace infera::testing
