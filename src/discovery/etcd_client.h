// EtcdClient: a small etcd v3 client over the JSON gateway (HTTP/1.1, Boost.Beast).
//
//   EtcdClientOptions options;
//   options.endpoints = "127.0.0.1:2379";
//   auto client = EtcdClient::Create(options);  // StatusOr<unique_ptr<EtcdClient>>
//   auto lease = (*client)->LeaseGrant(30);
//   (*client)->Put("/infera/workers/h:1", record_json, lease->id);
//   auto snapshot = (*client)->RangePrefix("/infera/workers/");
//   (*client)->WatchPrefix("/infera/workers/", snapshot->revision + 1, on_message);
//
// Every call opens its own connection (discovery is not a hot path), runs on the
// calling thread, and is bounded: unary calls by request_timeout_ms end to end, the
// watch stream by watch_idle_timeout_ms without any byte. Failures come back as a
// Status: Unavailable (cannot connect, connection lost, HTTP 5xx), DeadlineExceeded
// (timeout), Cancelled (Cancel()), the gateway's gRPC code for etcd errors (e.g.
// NotFound for an unknown lease), InvalidArgument for a malformed answer. With
// several endpoints ("a:2379,b:2379") a call that cannot connect moves to the next
// one for the following call.
//
// Thread-safety: one thread makes calls; Cancel() may be called from any thread and
// makes the current and every later call return Cancelled promptly (within
// kCancelPollMs).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "discovery/etcd_json.h"

namespace infera::discovery {

struct EtcdClientOptions {
  // Comma-separated "host:port" or "http://host:port" list.
  std::string endpoints = "127.0.0.1:2379";
  int64_t request_timeout_ms = 5000;
  int64_t watch_idle_timeout_ms = 60000;
  size_t max_response_bytes = 64 * 1024 * 1024;
};

class EtcdClient {
 public:
  static constexpr int64_t kCancelPollMs = 50;

  // InvalidArgument when the endpoint list does not parse.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdClientOptions options);

  absl::StatusOr<EtcdRangeResult> RangePrefix(std::string_view prefix);
  // Returns the revision of the write.
  absl::StatusOr<int64_t> Put(std::string_view key, std::string_view value, int64_t lease_id = 0);
  absl::StatusOr<int64_t> DeleteKey(std::string_view key);
  // Compacts the history up to revision (operators and tests).
  absl::Status Compact(int64_t revision);
  absl::StatusOr<EtcdLease> LeaseGrant(int64_t ttl_s);
  // One keepalive round trip; the returned ttl_s <= 0 means the lease is gone.
  absl::StatusOr<EtcdLease> LeaseKeepAlive(int64_t lease_id);
  absl::Status LeaseRevoke(int64_t lease_id);

  // Watches every key under prefix from start_revision, calling on_message for each
  // stream message in order, until on_message returns a non-OK status (returned
  // as is), the stream fails or idles out, or Cancel(). Never returns OK.
  absl::Status WatchPrefix(std::string_view prefix, int64_t start_revision,
                           const std::function<absl::Status(const EtcdWatchMessage&)>& on_message);

  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  // The endpoint ("host:port") the next call goes to.
  std::string current_endpoint() const;

 private:
  struct Endpoint {
    std::string host;
    std::string port;
  };
  EtcdClient(EtcdClientOptions options, std::vector<Endpoint> endpoints);

  // POSTs body to path; on_data gets the response body as it arrives (for a non-200
  // answer the body is collected and turned into a status instead).
  absl::Status Post(std::string_view path, const std::string& body, bool streaming,
                    const std::function<absl::Status(std::string_view)>& on_data);
  absl::StatusOr<std::string> PostUnary(std::string_view path, const std::string& body);

  EtcdClientOptions options_;
  std::vector<Endpoint> endpoints_;
  std::atomic<size_t> endpoint_index_{0};
  std::atomic<bool> cancelled_{false};
};

}  // namespace infera::discovery
