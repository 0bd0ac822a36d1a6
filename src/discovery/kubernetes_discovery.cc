#include "discovery/kubernetes_discovery.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <vector>

#include "discovery/backoff.h"
#include "discovery/internal/str_cat.h"
#include "discovery/worker_table.h"

namespace infera::discovery {
namespace {

using internal::MessageOf;

// The `discovery_k8s` logger (--log-level discovery_k8s=debug, or RUST_LOG
// infera_router::discovery_k8s=debug); it writes where the default logger writes.
spdlog::logger& Log() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    if (auto existing = spdlog::get("discovery_k8s")) return existing;
    const auto& sinks = spdlog::default_logger()->sinks();
    auto created = std::make_shared<spdlog::logger>("discovery_k8s", sinks.begin(), sinks.end());
    spdlog::initialize_logger(created);
    return created;
  }();
  return *logger;
}

const char* EventName(KubeEventType t) {
  switch (t) {
    case KubeEventType::kAdded:
      return "ADDED";
    case KubeEventType::kModified:
      return "MODIFIED";
    case KubeEventType::kDeleted:
      return "DELETED";
    case KubeEventType::kBookmark:
      return "BOOKMARK";
    case KubeEventType::kError:
      return "ERROR";
  }
  return "?";
}

}  // namespace

KubernetesDiscovery::KubernetesDiscovery(KubernetesDiscoveryOptions options)
    : options_(std::move(options)) {}

KubernetesDiscovery::~KubernetesDiscovery() { Stop(); }

absl::Status KubernetesDiscovery::Start(DiscoveryCallbacks callbacks) {
  if (thread_.joinable() || client_ != nullptr) {
    return absl::FailedPreconditionError("KubernetesDiscovery started twice");
  }
  if (options_.label_selector.empty()) {
    return absl::InvalidArgumentError(
        "--discovery-backend kubernetes requires --k8s-label-selector (an empty selector "
        "would register every annotated Pod of the namespace)");
  }
  if (options_.namespace_name.empty()) return absl::InvalidArgumentError("empty k8s namespace");
  if (options_.backoff_initial_ms <= 0 || options_.backoff_max_ms < options_.backoff_initial_ms) {
    return absl::InvalidArgumentError("bad kubernetes backoff settings");
  }
  auto client = KubeClient::Create(options_.client);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  Log();  // created now, so --log-level / RUST_LOG levels apply before the thread logs
  thread_ = std::thread(
      [this, callbacks = std::move(callbacks)]() mutable { Run(std::move(callbacks)); });
  return absl::OkStatus();
}

void KubernetesDiscovery::Stop() {
  {
    base::MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_cv_.NotifyAll();
  if (client_ != nullptr) client_->Cancel();
  if (thread_.joinable()) thread_.join();
}

bool KubernetesDiscovery::SleepMs(int64_t delay_ms) {
  base::MutexLock lock(mu_);
  return !stop_cv_.WaitFor(mu_, delay_ms,
                           [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; });
}

void KubernetesDiscovery::Run(DiscoveryCallbacks callbacks) {
  WorkerTable table(std::move(callbacks));
  Backoff backoff(options_.backoff_initial_ms, options_.backoff_max_ms, options_.backoff_seed);
  const std::string& ns = options_.namespace_name;
  const std::string& selector = options_.label_selector;
  auto log_rejected = [&](const absl::Status& s) {
    rejected_record_count_.fetch_add(1);
    Log().warn("k8s discovery: ignoring an invalid {} annotation: {}", kWorkerInfoAnnotation,
               MessageOf(s));
  };
  auto apply = [&](const KubePod& pod, bool deleted) {
    if (deleted || !pod.Routable()) {
      table.ApplyDelete(pod.name);
    } else if (absl::Status s = table.ApplyPut(pod.name, *pod.worker_info); !s.ok()) {
      log_rejected(s);
    }
  };

  std::string resource_version;  // empty: list first
  bool listed = false;
  while (!client_->cancelled()) {
    if (!listed) {
      auto list = client_->ListPods(ns, selector);
      if (!list.ok()) {
        if (client_->cancelled()) break;
        error_count_.fetch_add(1);
        const int64_t delay_ms = backoff.NextDelayMs();
        Log().warn("k8s discovery: listing pods ({} in {}) at {} failed: {}; retrying in {} ms",
                   selector, ns, client_->server(), MessageOf(list.status()), delay_ms);
        if (!SleepMs(delay_ms)) break;
        continue;
      }
      std::vector<EtcdKv> present;
      for (const KubePod& pod : list->pods) {
        if (pod.Routable()) present.push_back(EtcdKv{pod.name, *pod.worker_info, 0, 0});
      }
      for (const absl::Status& s : table.ReplaceAll(present)) log_rejected(s);
      resource_version = list->resource_version;
      listed = true;
      list_count_.fetch_add(1);
      Log().info("k8s discovery: (re)list of {} in {}: {} pods, {} workers (resourceVersion {})",
                 selector, ns, list->pods.size(), table.size(), resource_version);
    }
    bool gone = false;
    absl::Status watch = client_->WatchPods(
        ns, selector, resource_version, [&](const KubeWatchEvent& event) -> absl::Status {
          if (event.type == KubeEventType::kError) {
            if (event.error_code == 410) {
              gone = true;
              return absl::OutOfRangeError(event.error_message);
            }
            return absl::UnavailableError(
                internal::Cat("watch ERROR ", event.error_code, ": ", event.error_message));
          }
          backoff.Reset();  // the stream is healthy
          if (!event.pod.resource_version.empty()) resource_version = event.pod.resource_version;
          if (event.type == KubeEventType::kBookmark) {
            bookmark_count_.fetch_add(1);
            Log().debug("k8s discovery: bookmark at resourceVersion {}", resource_version);
            return absl::OkStatus();
          }
          Log().debug("k8s discovery: {} pod {} (phase {}{}{}) resourceVersion {}",
                      EventName(event.type), event.pod.name, event.pod.phase,
                      event.pod.terminating ? ", terminating" : "",
                      event.pod.worker_info ? ", annotated" : "", resource_version);
          apply(event.pod, event.type == KubeEventType::kDeleted);
          return absl::OkStatus();
        });
    if (client_->cancelled()) break;
    if (gone || watch.code() == absl::StatusCode::kOutOfRange) {
      gone_count_.fetch_add(1);
      Log().info("k8s discovery: resourceVersion {} is gone (410: {}); listing again",
                 resource_version, MessageOf(watch));
      listed = false;
      continue;
    }
    if (watch.ok()) continue;  // the server ended the watch: resume from resource_version
    error_count_.fetch_add(1);
    const int64_t delay_ms = backoff.NextDelayMs();
    Log().warn("k8s discovery: watch of {} in {} at {} ended: {}; listing again in {} ms", selector,
               ns, client_->server(), MessageOf(watch), delay_ms);
    listed = false;
    if (!SleepMs(delay_ms)) break;
  }
}

}  // namespace infera::discovery
