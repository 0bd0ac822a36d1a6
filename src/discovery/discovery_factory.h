// CreateDiscovery: the Discovery backend the router's flags ask for.
//
//   DiscoveryConfig config;
//   config.backend = "etcd";                 // --discovery-backend
//   config.etcd_endpoint = "etcd:2379";      // --etcd-endpoint
//   auto discovery = CreateDiscovery(config);  // StatusOr<unique_ptr<Discovery>>
//
// backend: "static" (--worker flags and/or --workers-file), "etcd", "kubernetes" (Pods
// by --k8s-label-selector, in-cluster credentials unless --k8s-api-server is given),
// or "" (auto: static when workers are given, else etcd). Bad flags, a bad workers
// file, or workers given together with another backend are InvalidArgument with a
// message naming the flag.
// Thread-safety: pure function (reads the workers file).
#pragma once

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "discovery/discovery.h"
#include "discovery/kube_client.h"

namespace infera::discovery {

struct DiscoveryConfig {
  std::string backend;                    // --discovery-backend
  std::vector<std::string> worker_flags;  // --worker, repeated
  std::string workers_file;               // --workers-file
  std::string etcd_endpoint = "127.0.0.1:2379";
  std::string etcd_prefix = "/infera/workers/";
  // --discovery-backend kubernetes.
  std::string k8s_label_selector;  // --k8s-label-selector (required)
  std::string k8s_namespace;       // --k8s-namespace ("": the Pod's own)
  std::string k8s_api_server;      // --k8s-api-server ("": in-cluster)
  std::string k8s_token_file;      // --k8s-token-file (with --k8s-api-server)
  std::string k8s_ca_file;         // --k8s-ca-file (https, with --k8s-api-server)
  std::string k8s_service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  std::function<const char*(const char*)> getenv = [](const char* n) { return std::getenv(n); };
};

// The Kubernetes client options these flags give (shared with infera-register --k8s):
// --k8s-api-server with its token and CA files, else the in-cluster service account.
absl::StatusOr<KubeClientOptions> KubeClientOptionsFrom(const DiscoveryConfig& config);

absl::StatusOr<std::unique_ptr<Discovery>> CreateDiscovery(const DiscoveryConfig& config);

}  // namespace infera::discovery
