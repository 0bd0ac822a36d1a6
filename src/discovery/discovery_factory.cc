#include "discovery/discovery_factory.h"

#include "discovery/etcd_discovery.h"
#include "discovery/internal/str_cat.h"
#include "discovery/static_discovery.h"

namespace infera::discovery {

using internal::Cat;
using internal::MessageOf;

absl::StatusOr<std::unique_ptr<Discovery>> CreateDiscovery(const DiscoveryConfig& config) {
  const bool has_workers = !config.worker_flags.empty() || !config.workers_file.empty();
  std::string backend = config.backend;
  if (backend.empty()) backend = has_workers ? "static" : "etcd";

  if (backend == "static") {
    std::vector<WorkerRecord> records;
    if (!config.workers_file.empty()) {
      auto loaded = LoadWorkersFile(config.workers_file);
      if (!loaded.ok())
        return absl::InvalidArgumentError(Cat("--workers-file: ", MessageOf(loaded.status())));
      records = *std::move(loaded);
    }
    for (const std::string& flag : config.worker_flags) {
      auto record = ParseWorkerFlag(flag);
      if (!record.ok()) return record.status();
      records.push_back(*std::move(record));
    }
    // Duplicates across --worker and --workers-file are reported by Start(); check
    // here too so the error surfaces at flag parsing.
    for (size_t i = 0; i < records.size(); ++i) {
      for (size_t j = i + 1; j < records.size(); ++j) {
        if (records[i].worker_id == records[j].worker_id) {
          return absl::InvalidArgumentError(
              Cat("worker '", records[i].worker_id, "' is given twice (--worker/--workers-file)"));
        }
      }
    }
    return std::unique_ptr<Discovery>(new StaticDiscovery(std::move(records)));
  }
  if (backend == "etcd") {
    if (has_workers) {
      return absl::InvalidArgumentError(
          "--worker/--workers-file cannot be combined with --discovery-backend etcd");
    }
    EtcdDiscoveryOptions options;
    options.client.endpoints = config.etcd_endpoint;
    options.prefix = config.etcd_prefix;
    if (auto client = EtcdClient::Create(options.client); !client.ok()) {
      return absl::InvalidArgumentError(Cat("--etcd-endpoint: ", MessageOf(client.status())));
    }
    if (options.prefix.empty())
      return absl::InvalidArgumentError("--etcd-prefix must not be empty");
    return std::unique_ptr<Discovery>(new EtcdDiscovery(std::move(options)));
  }
  if (backend == "kubernetes" || backend == "k8s") {
    return absl::UnimplementedError(
        "--discovery-backend kubernetes is not available in this build; use etcd or static");
  }
  return absl::InvalidArgumentError(
      Cat("--discovery-backend must be static, etcd or kubernetes, got '", backend, "'"));
}

}  // namespace infera::discovery
