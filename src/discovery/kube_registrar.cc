#include "discovery/kube_registrar.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "discovery/backoff.h"
#include "discovery/internal/str_cat.h"

namespace infera::discovery {

using internal::MessageOf;

absl::StatusOr<std::unique_ptr<KubeRegistrar>> KubeRegistrar::Create(WorkerRecord record,
                                                                     KubeRegistrarOptions options) {
  if (options.pod_name.empty()) {
    return absl::InvalidArgumentError(
        "infera-register --k8s needs its Pod's name: --k8s-pod or POD_NAME (downward API)");
  }
  if (options.namespace_name.empty()) {
    return absl::InvalidArgumentError("infera-register --k8s: empty namespace");
  }
  if (options.refresh_s < 1) return absl::InvalidArgumentError("--k8s-refresh-s must be >= 1");
  auto client = KubeClient::Create(options.client);
  if (!client.ok()) return client.status();
  return std::unique_ptr<KubeRegistrar>(
      new KubeRegistrar(std::move(record), std::move(options), *std::move(client)));
}

KubeRegistrar::KubeRegistrar(WorkerRecord record, KubeRegistrarOptions options,
                             std::unique_ptr<KubeClient> client)
    : record_json_(SerializeWorkerRecord(record)),
      worker_id_(record.worker_id),
      options_(std::move(options)),
      client_(std::move(client)) {}

KubeRegistrar::~KubeRegistrar() {
  if (thread_.joinable()) (void)Stop();
}

void KubeRegistrar::Start() {
  thread_ = std::thread([this] { Run(); });
}

bool KubeRegistrar::SleepMs(int64_t delay_ms) {
  base::MutexLock lock(mu_);
  return !stop_cv_.WaitFor(mu_, delay_ms,
                           [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; });
}

void KubeRegistrar::Run() {
  Backoff backoff(options_.backoff_initial_ms, options_.backoff_max_ms, options_.backoff_seed);
  const std::string where = options_.namespace_name + "/" + options_.pod_name;
  while (!client_->cancelled()) {
    absl::Status s = client_->PatchPodAnnotation(options_.namespace_name, options_.pod_name,
                                                 kWorkerInfoAnnotation, record_json_);
    if (client_->cancelled()) break;
    if (!s.ok()) {
      const int64_t delay_ms = backoff.NextDelayMs();
      spdlog::warn("kube registrar: annotating pod {} failed: {}; retrying in {} ms", where,
                   MessageOf(s), delay_ms);
      if (!SleepMs(delay_ms)) break;
      continue;
    }
    if (patch_count_.fetch_add(1) == 0) {
      spdlog::info("kube registrar: worker {} registered in pod {} ({})", worker_id_, where,
                   kWorkerInfoAnnotation);
    }
    backoff.Reset();
    if (!SleepMs(options_.refresh_s * 1000)) break;
  }
}

absl::Status KubeRegistrar::Stop() {
  {
    base::MutexLock lock(mu_);
    if (stopping_ && !thread_.joinable()) return absl::OkStatus();
    stopping_ = true;
  }
  stop_cv_.NotifyAll();
  client_->Cancel();
  if (thread_.joinable()) thread_.join();
  // A fresh client: the loop's is cancelled.
  auto clear = KubeClient::Create(options_.client);
  if (!clear.ok()) return clear.status();
  absl::Status s = (*clear)->PatchPodAnnotation(options_.namespace_name, options_.pod_name,
                                                kWorkerInfoAnnotation, std::nullopt);
  if (s.ok()) {
    spdlog::info("kube registrar: worker {} deregistered (annotation of pod {}/{} removed)",
                 worker_id_, options_.namespace_name, options_.pod_name);
  }
  return s;
}

}  // namespace infera::discovery
