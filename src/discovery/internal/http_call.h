// HttpCall: one blocking HTTP/1.1 exchange (plain or TLS) for the discovery clients
// (EtcdClient, KubeClient): discovery is not a hot path, so each call opens its own
// connection and runs on the calling thread, in short slices so that a cancel flag set
// from another thread ends it within kCancelPollMs.
//
// Bounds: the whole exchange by request_timeout_ms (unary), or each read by
// idle_timeout_ms (streaming: a body that goes quiet that long ends the call with
// DeadlineExceeded). A 2xx body is handed to on_data as it arrives; any other
// status's body (its first 64 KiB) is returned in HttpCallResult::error_body for the
// caller to turn into its own error. TLS verifies the peer against ca_file (a PEM
// bundle; empty: the system's roots) and the endpoint's host name (SNI too).
//
// Errors: Unavailable (resolve, connect, TLS handshake, I/O), DeadlineExceeded,
// Cancelled, or on_data's own status.
// Thread-safety: a pure function of its arguments; `cancelled` may be set from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace infera::discovery::internal {

inline constexpr int64_t kCancelPollMs = 50;

struct HttpEndpoint {
  std::string host;
  std::string port;
  bool tls = false;
  std::string ca_file;  // TLS: PEM bundle of trusted CAs; empty: the system's
  std::string Name() const { return host + ":" + port; }
};

struct HttpCallOptions {
  std::string method = "POST";
  std::string target;  // path and query
  std::string body;    // sent when non-empty (or when content_type is set)
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  bool streaming = false;
  int64_t request_timeout_ms = 5000;
  int64_t idle_timeout_ms = 60000;
  size_t max_response_bytes = 64 * 1024 * 1024;
  std::string service = "http";  // names the peer in error messages ("etcd", "kubernetes")
};

struct HttpCallResult {
  int status = 0;
  std::string error_body;  // a non-2xx answer's body (first 64 KiB)
  bool body_complete = false;
};

// `connect_failed` (may be null) is set when no connection was made (resolve or
// connect failed), so a caller with several endpoints can move on.
absl::StatusOr<HttpCallResult> HttpCall(
    const HttpEndpoint& endpoint, const HttpCallOptions& options,
    const std::atomic<bool>& cancelled,
    const std::function<absl::Status(std::string_view)>& on_data, bool* connect_failed = nullptr);

}  // namespace infera::discovery::internal
