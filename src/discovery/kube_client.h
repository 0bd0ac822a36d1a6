// KubeClient: the three calls Kubernetes discovery makes to the API server — list and
// watch the Pods of a namespace by label selector, and merge-patch one Pod's
// annotation — over HTTP/1.1 (TLS when the server URL is https), with a bearer token.
// doc/discovery.md §3.
//
//   KubeClientOptions o = *KubeClientOptions::InCluster("/var/run/secrets/...", getenv);
//   auto client = KubeClient::Create(o);
//   auto list = (*client)->ListPods("default", "app=vllm");
//   (*client)->WatchPods("default", "app=vllm", list->resource_version, on_event);
//   (*client)->PatchPodAnnotation("default", "vllm-0", kWorkerInfoAnnotation, record);
//
// In-cluster credentials are those every Pod gets: https://$KUBERNETES_SERVICE_HOST:
// $KUBERNETES_SERVICE_PORT, the service account's token, ca.crt and namespace files.
// The token file is read again for every call (projected tokens are rotated, an hour
// by default). Every call opens its own connection and is bounded (unary calls by
// request_timeout_ms; a watch by watch_idle_timeout_ms without a byte; the watch asks
// the server to end it after watch_timeout_s). Errors: Unavailable (connection, 5xx),
// DeadlineExceeded, Cancelled, PermissionDenied (401/403), NotFound (404),
// OutOfRange (410 Gone: the resourceVersion is too old), InvalidArgument (a malformed
// answer, a 4xx), each with the API server's Status message.
//
// Thread-safety: one thread makes calls; Cancel() may be called from any thread and
// makes the current and every later call return Cancelled promptly.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "discovery/internal/http_call.h"
#include "discovery/kube_json.h"

namespace infera::discovery {

// Where a Pod's service account files are mounted.
inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

struct KubeClientOptions {
  std::string api_server;  // "https://host:port" or "http://host:port"
  std::string token;       // bearer token; token_file wins when set
  std::string token_file;  // read before every call
  std::string ca_file;     // https: PEM bundle of the cluster CA (empty: the system's)
  int64_t request_timeout_ms = 10000;
  int64_t watch_idle_timeout_ms = 330000;
  int64_t watch_timeout_s = 300;  // the server ends a watch after this (timeoutSeconds)

  // In-cluster: the service host and port from the environment, the token and CA
  // files under sa_dir. FailedPrecondition when not inside a Pod.
  static absl::StatusOr<KubeClientOptions> InCluster(
      const std::string& sa_dir, const std::function<const char*(const char*)>& getenv);
};

// The Pod's own namespace (sa_dir/namespace), else "default" (as Infera's
// in_cluster_namespace).
std::string InClusterNamespace(const std::string& sa_dir);

class KubeClient {
 public:
  static absl::StatusOr<std::unique_ptr<KubeClient>> Create(KubeClientOptions options);

  absl::StatusOr<KubePodList> ListPods(std::string_view ns, std::string_view selector);
  // Watches from resource_version ("": from now) with bookmarks, calling on_event for
  // each event in order until on_event returns non-OK (returned as is), the stream
  // fails or idles out, or Cancel(). Returns OK when the server ended the watch
  // cleanly (its timeoutSeconds): resume from the last resourceVersion seen.
  absl::Status WatchPods(std::string_view ns, std::string_view selector,
                         std::string_view resource_version,
                         const std::function<absl::Status(const KubeWatchEvent&)>& on_event);
  // Sets (or, with nullopt, removes) one annotation of a Pod: a JSON merge patch.
  absl::Status PatchPodAnnotation(std::string_view ns, std::string_view pod, std::string_view key,
                                  const std::optional<std::string>& value);

  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  std::string server() const { return options_.api_server; }

 private:
  KubeClient(KubeClientOptions options, internal::HttpEndpoint endpoint);
  absl::StatusOr<internal::HttpCallResult> Call(
      internal::HttpCallOptions call, const std::function<absl::Status(std::string_view)>& on_data);

  KubeClientOptions options_;
  internal::HttpEndpoint endpoint_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace infera::discovery
