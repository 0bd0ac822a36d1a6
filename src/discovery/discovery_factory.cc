#include "discovery/discovery_factory.h"

#include "discovery/etcd_discovery.h"
#include "discovery/internal/str_cat.h"
#include "discovery/kubernetes_discovery.h"
#include "discovery/static_discovery.h"

namespace infera::discovery {

using internal::Cat;
using internal::MessageOf;

absl::StatusOr<KubeClientOptions> KubeClientOptionsFrom(const DiscoveryConfig& config) {
  if (config.k8s_api_server.empty()) {
    if (!config.k8s_token_file.empty() || !config.k8s_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--k8s-token-file and --k8s-ca-file go with --k8s-api-server (in-cluster credentials "
          "come from the service account)");
    }
    auto in_cluster = KubeClientOptions::InCluster(config.k8s_service_account_dir, config.getenv);
    if (!in_cluster.ok()) return absl::InvalidArgumentError(MessageOf(in_cluster.status()));
    return in_cluster;
  }
  KubeClientOptions options;
  options.api_server = config.k8s_api_server;
  options.token_file = config.k8s_token_file;
  options.ca_file = config.k8s_ca_file;
  return options;
}

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
  if (backend == "kubernetes") {
    if (has_workers) {
      return absl::InvalidArgumentError(
          "--worker/--workers-file cannot be combined with --discovery-backend kubernetes");
    }
    KubernetesDiscoveryOptions options;
    options.label_selector = config.k8s_label_selector;
    if (options.label_selector.empty()) {
      return absl::InvalidArgumentError(
          "--discovery-backend kubernetes requires --k8s-label-selector (or "
          "INFERA_K8S_LABEL_SELECTOR): an empty selector would register every annotated Pod "
          "of the namespace");
    }
    auto client = KubeClientOptionsFrom(config);
    if (!client.ok()) return client.status();
    options.client = *std::move(client);
    if (auto probe = KubeClient::Create(options.client); !probe.ok()) return probe.status();
    options.namespace_name = config.k8s_namespace.empty()
                                 ? InClusterNamespace(config.k8s_service_account_dir)
                                 : config.k8s_namespace;
    return std::unique_ptr<Discovery>(new KubernetesDiscovery(std::move(options)));
  }
  return absl::InvalidArgumentError(
      Cat("--discovery-backend must be static, etcd or kubernetes, got '", backend, "'"));
}

}  // namespace infera::discovery
