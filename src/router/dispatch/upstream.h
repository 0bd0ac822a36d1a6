// Upstream: how the router talks to a worker (one HTTP exchange per leg).
//
// Send() writes the request and completes when the answer's head arrived; the body
// is then read piece by piece (a streaming relay) or whole. HttpUpstream is the real
// one (src/http's keep-alive client, one pool per event loop); tests use a fake that
// scripts answers and failures (router_pipeline_test.cc). NatsUpstream is the NATS
// request transport (--request-transport nats); TransportUpstream picks one of the two
// per request from the worker's record (request_transport).
//
// Errors, as http::Client reports them: cannot connect / connection lost ->
// Unavailable; deadline passed -> DeadlineExceeded; cancelled -> Cancelled;
// malformed answer -> DataLoss.
//
// Thread-safety: an Upstream is shared by all loops; a response is used on the loop
// that sent its request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "http/asio.h"
#include "http/client.h"
#include "http/headers.h"
#include "http/url.h"

namespace infera::router {

// How a worker takes requests: its record's request_transport (Infera's field).
enum class RequestTransport : uint8_t { kHttp, kNats };

struct UpstreamRequest {
  http::Endpoint endpoint;
  // The worker: over NATS its id names its subject (nats_upstream.h).
  std::string worker_id;
  RequestTransport transport = RequestTransport::kHttp;
  std::string method = "POST";
  std::string path;  // appended to the endpoint's base path
  http::Headers headers;
  std::string body;
  int64_t deadline_ns = 0;  // on the router's clock
  std::shared_ptr<http::Cancellation> cancel;
};

class UpstreamResponse {
 public:
  virtual ~UpstreamResponse() = default;
  virtual int status() const = 0;
  virtual const http::Headers& headers() const = 0;
  // The next piece of the body as it arrived; nullopt after its end.
  virtual http::Awaitable<absl::StatusOr<std::optional<std::string>>> Read() = 0;
  // The rest of the body; more than max_bytes -> ResourceExhausted.
  virtual http::Awaitable<absl::StatusOr<std::string>> ReadAll(uint64_t max_bytes) = 0;
  // Aborts the exchange (the worker sees its connection close). Idempotent.
  virtual void Cancel() = 0;
};

class Upstream {
 public:
  virtual ~Upstream() = default;
  virtual http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> Send(
      UpstreamRequest request) = 0;
};

// A failure whose cause the client may read: `client_message` (no address, worker id
// or subject) rides on the status as a payload; SendFailures::Judge puts it in the
// 502 after "the worker failed before answering: ". The status message keeps the
// whole detail for the log.
inline constexpr char kClientMessagePayload[] = "infera.dev/client-message";

inline absl::Status WithClientMessage(absl::Status status, std::string_view client_message) {
  status.SetPayload(kClientMessagePayload,
                    absl::Cord(absl::string_view(client_message.data(), client_message.size())));
  return status;
}

// The status's own message, marked as readable by the client (it names no address).
inline absl::Status ClientReadable(absl::Status status) {
  const std::string message(status.message());
  return WithClientMessage(std::move(status), message);
}

// The client-readable cause WithClientMessage attached, or "" when there is none.
inline std::string ClientMessage(const absl::Status& status) {
  auto payload = status.GetPayload(kClientMessagePayload);
  return payload.has_value() ? std::string(*payload) : std::string();
}

}  // namespace infera::router
