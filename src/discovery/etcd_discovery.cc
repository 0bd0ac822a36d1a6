#include "discovery/etcd_discovery.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "discovery/backoff.h"
#include "discovery/internal/str_cat.h"
#include "discovery/worker_table.h"
#include "log/rate_limited_log.h"

namespace infera::discovery {

using internal::MessageOf;

EtcdDiscovery::EtcdDiscovery(EtcdDiscoveryOptions options) : options_(std::move(options)) {}

EtcdDiscovery::~EtcdDiscovery() { Stop(); }

absl::Status EtcdDiscovery::Start(DiscoveryCallbacks callbacks) {
  if (thread_.joinable() || client_ != nullptr) {
    return absl::FailedPreconditionError("EtcdDiscovery started twice");
  }
  if (options_.prefix.empty()) return absl::InvalidArgumentError("etcd prefix must not be empty");
  if (options_.backoff_initial_ms <= 0 || options_.backoff_max_ms < options_.backoff_initial_ms) {
    return absl::InvalidArgumentError("bad etcd backoff settings");
  }
  auto client = EtcdClient::Create(options_.client);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  thread_ = std::thread(
      [this, callbacks = std::move(callbacks)]() mutable { Run(std::move(callbacks)); });
  return absl::OkStatus();
}

void EtcdDiscovery::Stop() {
  {
    base::MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_cv_.NotifyAll();
  if (client_ != nullptr) client_->Cancel();
  if (thread_.joinable()) thread_.join();
}

bool EtcdDiscovery::SleepMs(int64_t delay_ms) {
  base::MutexLock lock(mu_);
  return !stop_cv_.WaitFor(mu_, delay_ms,
                           [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; });
}

void EtcdDiscovery::Run(DiscoveryCallbacks callbacks) {
  WorkerTable table(std::move(callbacks));
  Backoff backoff(options_.backoff_initial_ms, options_.backoff_max_ms, options_.backoff_seed);
  const std::string& prefix = options_.prefix;
  // One line per invalid record would let one writer of the prefix flood the log: a
  // few per interval, then a summary (log/rate_limited_log.h).
  log::RateLimitedLog limited;
  auto log_rejected = [&](const absl::Status& s) {
    rejected_record_count_.fetch_add(1);
    limited.Warn("etcd discovery: invalid worker record",
                 "etcd discovery: ignoring invalid worker record: {}", MessageOf(s));
  };

  while (!client_->cancelled()) {
    auto snapshot = client_->RangePrefix(prefix);
    if (!snapshot.ok()) {
      if (client_->cancelled()) break;
      error_count_.fetch_add(1);
      int64_t delay_ms = backoff.NextDelayMs();
      spdlog::warn("etcd discovery: range {} at {} failed: {}; retrying in {} ms", prefix,
                   client_->current_endpoint(), MessageOf(snapshot.status()), delay_ms);
      if (!SleepMs(delay_ms)) break;
      continue;
    }
    for (const absl::Status& s : table.ReplaceAll(snapshot->kvs)) log_rejected(s);
    snapshot_count_.fetch_add(1);
    spdlog::info("etcd discovery: snapshot of {} at revision {}: {} workers", prefix,
                 snapshot->revision, table.size());

    int64_t next_revision = snapshot->revision + 1;
    bool compacted = false;
    absl::Status watch = client_->WatchPrefix(
        prefix, next_revision, [&](const EtcdWatchMessage& message) -> absl::Status {
          if (message.canceled) {
            if (message.compact_revision > 0) {
              compacted = true;
              return absl::OutOfRangeError(internal::Cat("watch revision ", next_revision,
                                                         " compacted (now at ",
                                                         message.compact_revision, ")"));
            }
            return absl::UnavailableError(
                internal::Cat("watch cancelled by etcd: ", message.cancel_reason));
          }
          limited.Flush();
          if (message.created) backoff.Reset();  // connected and in sync again
          for (const EtcdWatchEvent& event : message.events) {
            next_revision = std::max(next_revision, event.kv.mod_revision + 1);
            if (event.type == EtcdWatchEvent::Type::kDelete) {
              table.ApplyDelete(event.kv.key);
            } else if (auto s = table.ApplyPut(event.kv.key, event.kv.value); !s.ok()) {
              log_rejected(s);
            }
          }
          return absl::OkStatus();
        });
    if (client_->cancelled()) break;
    if (compacted) {
      spdlog::info("etcd discovery: {}; taking a new snapshot", MessageOf(watch));
      continue;
    }
    error_count_.fetch_add(1);
    int64_t delay_ms = backoff.NextDelayMs();
    spdlog::warn("etcd discovery: watch {} at {} ended: {}; resyncing in {} ms", prefix,
                 client_->current_endpoint(), MessageOf(watch), delay_ms);
    if (!SleepMs(delay_ms)) break;
  }
}

}  // namespace infera::discovery
