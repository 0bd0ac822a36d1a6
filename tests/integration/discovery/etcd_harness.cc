#include "etcd_harness.h"

#include <signal.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>

#include "discovery/etcd_client.h"
#include "testing/wait_for.h"

namespace infera::testing {

EtcdHarness::EtcdHarness() {
  std::string templ = (std::filesystem::temp_directory_path() / "infera-etcd-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) std::abort();
  work_dir_ = templ;
}

EtcdHarness::~EtcdHarness() {
  Kill();
  std::error_code ignored;
  std::filesystem::remove_all(work_dir_, ignored);
}

std::string EtcdHarness::endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }

absl::Status EtcdHarness::Start(int64_t timeout_ms) {
  if (running()) return absl::FailedPreconditionError("etcd already running");
  if (client_port_ < 0) {
    client_port_ = PickFreePort();
    peer_port_ = PickFreePort();
    if (client_port_ <= 0 || peer_port_ <= 0 || client_port_ == peer_port_) {
      return absl::UnavailableError("no free ports for etcd");
    }
  }
  const char* bin = std::getenv("INFERA_ETCD_BIN");
  std::string client_url = "http://127.0.0.1:" + std::to_string(client_port_);
  std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port_);
  process_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{
          bin != nullptr ? bin : "/usr/bin/etcd", "--name", "infera-test", "--data-dir",
          work_dir_ + "/data", "--listen-client-urls", client_url, "--advertise-client-urls",
          client_url, "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
          "--initial-cluster", "infera-test=" + peer_url, "--log-level", "warn"},
      work_dir_ + "/etcd.log");
  if (auto s = process_->Start(); !s.ok()) return s;

  discovery::EtcdClientOptions options;
  options.endpoints = endpoint();
  options.request_timeout_ms = 1000;
  auto client = discovery::EtcdClient::Create(options);
  if (!client.ok()) return client.status();
  bool up = WaitFor(
      [&] {
        if (process_->Wait(0) != -1) return true;  // exited: stop waiting
        return (*client)->RangePrefix("/").ok();
      },
      timeout_ms, 100);
  if (!process_->running()) {
    return absl::InternalError("etcd exited during startup; see " + work_dir_ + "/etcd.log");
  }
  if (!up)
    return absl::DeadlineExceededError("etcd did not answer; see " + work_dir_ + "/etcd.log");
  return absl::OkStatus();
}

void EtcdHarness::Stop() {
  if (process_ != nullptr) process_->Stop();
}

void EtcdHarness::Kill() {
  if (process_ != nullptr && process_->running()) {
    process_->Signal(SIGKILL);
    process_->Wait(10000);
  }
}

void EtcdHarness::WipeData() {
  std::error_code ignored;
  std::filesystem::remove_all(work_dir_ + "/data", ignored);
}

}  // namespace infera::testing
