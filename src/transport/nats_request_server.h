// NatsRequestServer: the worker side of the NATS request transport
// (doc/nats-request-transport.md), as Infera's NatsRequestServer does it
// (infera/common/nats_request.py): subscribes to the worker's subject
// `infera.req.<token(worker_id)>`, proxies each request to the engine's own HTTP and
// publishes the answer back to the request's inbox as frames (nats_request_wire.h):
// data frames as the engine's body arrives (the first also carries rs-status and
// rs-content-type; a piece over the server's max payload is split), then done with
// the status; an error frame when the exchange fails (engine unreachable or gone
// mid-answer, idle timeout, max duration, cancelled: "request cancelled").
//
// Cancel: a message on `infera.cancel.<token(worker_id)>` whose payload is a request's
// inbox aborts that request's engine exchange (its connection is closed, so the engine
// stops generating). Idle timeout: an engine silent this long (before its head or
// between two body pieces) is abandoned; max duration: a hard cap on each exchange (a
// backstop for a lost cancel). At most max_inflight requests are proxied at once; past
// it a request gets an error frame at once (the router fails over).
//
// Used by infera-register (the sidecar beside a real engine) and by infera-mock-engine
// (serving its own HTTP handler through the same code). Thread-safety: Start/Stop from
// one controlling thread; messages arrive on libnats threads, the exchanges run on the
// pool's loops.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "http/io_pool.h"
#include "http/url.h"

namespace infera::transport {

struct NatsRequestServerOptions {
  std::string worker_id;  // the record's worker_id: names the subjects
  http::Endpoint engine;  // where requests are proxied (the engine's HTTP)
  std::string nats_url = "nats://127.0.0.1:4222";
  int64_t idle_timeout_ms = 900'000;  // --nats-req-idle-timeout (0: off)
  int64_t max_duration_ms = 0;        // --nats-req-max-duration (0: off)
  size_t max_inflight = 4096;
};

// InvalidArgument naming the flag: an empty worker id, timeouts below 0 or above 30
// days, max_inflight 0.
absl::Status ValidateNatsRequestServerOptions(const NatsRequestServerOptions& options);

class NatsRequestServer {
 public:
  // REQUIRES: Validate...(options).ok(); the pool runs from Start() until Stop() returns.
  NatsRequestServer(NatsRequestServerOptions options, http::IoPool& pool);
  ~NatsRequestServer();  // Stop(0)
  NatsRequestServer(const NatsRequestServer&) = delete;
  NatsRequestServer& operator=(const NatsRequestServer&) = delete;

  // Connects (in the background while no server answers) and subscribes. Logs
  // "NATS request consumer up: subject=... -> http://..." once the subscriptions are
  // at the server. An error only for a bad URL.
  absl::Status Start();
  // Takes no more requests; lets those in flight finish for up to drain_timeout_ms,
  // then cancels the rest and waits (bounded) for them to end. Idempotent.
  void Stop(int64_t drain_timeout_ms = 0);

  const std::string& subject() const;
  struct Core;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace infera::transport
