#include "discovery/etcd_registrar.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "discovery/backoff.h"
#include "discovery/internal/str_cat.h"

namespace infera::discovery {

using internal::MessageOf;

absl::StatusOr<std::unique_ptr<EtcdRegistrar>> EtcdRegistrar::Create(WorkerRecord record,
                                                                     EtcdRegistrarOptions options) {
  if (options.prefix.empty()) return absl::InvalidArgumentError("etcd prefix must not be empty");
  if (record.worker_id.empty()) return absl::InvalidArgumentError("worker_id must not be empty");
  if (options.lease_ttl_s < 2) return absl::InvalidArgumentError("lease TTL must be at least 2 s");
  if (options.keepalive_interval_s <= 0 || options.keepalive_interval_s >= options.lease_ttl_s) {
    return absl::InvalidArgumentError("keepalive interval must be positive and below the TTL");
  }
  if (options.backoff_initial_ms <= 0 || options.backoff_max_ms < options.backoff_initial_ms) {
    return absl::InvalidArgumentError("bad etcd backoff settings");
  }
  auto client = EtcdClient::Create(options.client);
  if (!client.ok()) return client.status();
  return std::unique_ptr<EtcdRegistrar>(
      new EtcdRegistrar(std::move(record), std::move(options), *std::move(client)));
}

EtcdRegistrar::EtcdRegistrar(WorkerRecord record, EtcdRegistrarOptions options,
                             std::unique_ptr<EtcdClient> client)
    : options_(std::move(options)),
      key_(options_.prefix + record.worker_id),
      value_(SerializeWorkerRecord(record)),
      client_(std::move(client)) {}

EtcdRegistrar::~EtcdRegistrar() { Stop().IgnoreError(); }

void EtcdRegistrar::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

absl::Status EtcdRegistrar::Stop() {
  {
    base::MutexLock lock(mu_);
    if (stopped_) return absl::OkStatus();
    stopping_ = true;
  }
  cv_.NotifyAll();
  client_->Cancel();
  if (thread_.joinable()) thread_.join();
  int64_t lease_id = 0;
  {
    base::MutexLock lock(mu_);
    lease_id = lease_id_;
    lease_id_ = 0;
    stopped_ = true;
  }
  cv_.NotifyAll();
  if (lease_id == 0) return absl::OkStatus();
  // The loop's client is cancelled; revoke through a fresh one.
  EtcdClientOptions revoke_options = options_.client;
  revoke_options.request_timeout_ms = std::min<int64_t>(revoke_options.request_timeout_ms, 3000);
  auto revoker = EtcdClient::Create(revoke_options);
  if (!revoker.ok()) return revoker.status();
  absl::Status s = (*revoker)->LeaseRevoke(lease_id);
  if (s.ok()) {
    spdlog::info("etcd registrar: revoked lease {:x} of {}", lease_id, key_);
  } else {
    spdlog::warn("etcd registrar: revoking lease {:x} of {} failed: {} (it expires in {} s)",
                 lease_id, key_, MessageOf(s), options_.lease_ttl_s);
  }
  return s;
}

bool EtcdRegistrar::SleepMs(int64_t delay_ms) {
  base::MutexLock lock(mu_);
  return !cv_.WaitFor(mu_, delay_ms,
                      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; });
}

bool EtcdRegistrar::WaitUntilRegistered(int64_t timeout_ms) {
  base::MutexLock lock(mu_);
  return cv_.WaitFor(mu_, timeout_ms, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return lease_id_ != 0 || stopping_;
  }) && lease_id_ != 0;
}

bool EtcdRegistrar::registered() const { return lease_id() != 0; }

int64_t EtcdRegistrar::lease_id() const {
  base::MutexLock lock(mu_);
  return lease_id_;
}

absl::Status EtcdRegistrar::Register() {
  auto lease = client_->LeaseGrant(options_.lease_ttl_s);
  if (!lease.ok()) return lease.status();
  auto put = client_->Put(key_, value_, lease->id);
  if (!put.ok()) {
    // Best effort: the unused lease would expire on its own anyway.
    (void)client_->LeaseRevoke(lease->id);
    return put.status();
  }
  {
    base::MutexLock lock(mu_);
    lease_id_ = lease->id;
  }
  cv_.NotifyAll();
  registration_count_.fetch_add(1);
  spdlog::info("etcd registrar: registered {} with lease {:x} (TTL {} s) at {}", key_, lease->id,
               lease->ttl_s, client_->current_endpoint());
  return absl::OkStatus();
}

void EtcdRegistrar::Run() {
  Backoff backoff(options_.backoff_initial_ms, options_.backoff_max_ms, options_.backoff_seed);
  const int64_t keepalive_ms = options_.keepalive_interval_s * 1000;
  while (!client_->cancelled()) {
    if (lease_id() == 0) {
      absl::Status s = Register();
      if (client_->cancelled()) break;
      if (!s.ok()) {
        int64_t delay_ms = backoff.NextDelayMs();
        spdlog::warn("etcd registrar: registering {} at {} failed: {}; retrying in {} ms", key_,
                     client_->current_endpoint(), MessageOf(s), delay_ms);
        if (!SleepMs(delay_ms)) break;
        continue;
      }
      backoff.Reset();
      if (!SleepMs(keepalive_ms)) break;
      continue;
    }
    auto alive = client_->LeaseKeepAlive(lease_id());
    if (client_->cancelled()) break;
    if (alive.ok() && alive->ttl_s > 0) {
      backoff.Reset();
      if (!SleepMs(keepalive_ms)) break;
      continue;
    }
    if (alive.ok() || alive.status().code() == absl::StatusCode::kNotFound) {
      spdlog::warn("etcd registrar: lease {:x} of {} is gone; registering again", lease_id(), key_);
      base::MutexLock lock(mu_);
      lease_id_ = 0;
      continue;
    }
    int64_t delay_ms = std::min(backoff.NextDelayMs(), keepalive_ms);
    spdlog::warn("etcd registrar: keepalive of {} at {} failed: {}; retrying in {} ms", key_,
                 client_->current_endpoint(), MessageOf(alive.status()), delay_ms);
    if (!SleepMs(delay_ms)) break;
  }
}

}  // namespace infera::discovery
