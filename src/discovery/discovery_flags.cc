#include "discovery/discovery_flags.h"

#include "discovery/static_discovery.h"

namespace infera::discovery {

void AddDiscoveryFlags(CLI::App& app, DiscoveryConfig& config) {
  app.add_option("--discovery-backend", config.backend,
                 "static | etcd | kubernetes (Pods by --k8s-label-selector, their "
                 "infera.amd.com/worker-info annotation)")
      ->capture_default_str();
  app.add_option("--k8s-label-selector", config.k8s_label_selector,
                 "kubernetes: label selector of the fleet's worker Pods (required)")
      ->envname("INFERA_K8S_LABEL_SELECTOR");
  app.add_option("--k8s-namespace", config.k8s_namespace,
                 "kubernetes: namespace to watch (default: the Pod's own, from the service "
                 "account, else default)");
  app.add_option("--k8s-api-server", config.k8s_api_server,
                 "kubernetes: API server URL https://host:port (default: in-cluster, "
                 "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT with the service account)");
  app.add_option("--k8s-token-file", config.k8s_token_file,
                 "kubernetes: bearer token file for --k8s-api-server (read for every call)");
  app.add_option("--k8s-ca-file", config.k8s_ca_file,
                 "kubernetes: CA bundle (PEM) for an https --k8s-api-server (default: system)");
  app.add_option("--k8s-service-account-dir", config.k8s_service_account_dir,
                 "kubernetes, in-cluster: where token, ca.crt and namespace are mounted")
      ->capture_default_str();
  app.add_option("--etcd-endpoint", config.etcd_endpoint, "etcd endpoints host:port[,host:port]")
      ->capture_default_str();
  app.add_option("--etcd-prefix", config.etcd_prefix, "etcd key prefix of worker records")
      ->capture_default_str();
  app.add_option("--worker", config.worker_flags, WorkerFlagHelp());
  app.add_option("--workers-file", config.workers_file,
                 "JSON list of worker records (etcd schema)");
}

}  // namespace infera::discovery
