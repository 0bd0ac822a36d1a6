// NatsConnection: one NATS client connection with its JetStream context, as the relay
// and the router's NatsEventSource use it (doc/nats-transport.md).
//
// Connect() returns at once even when no server answers yet: the client keeps trying
// (retry on failed connect, unlimited reconnects every reconnect_wait_ms) and calls
// on_reconnect after each (re)connection. EnsureStream() creates INFERA_KV_EVENTS when
// missing (file storage, discard old, limits retention, the given limits); an existing
// stream is used as it is.
//
// Thread-safety: the libnats handles are thread-safe; so is every method.
#pragma once

#include <nats/nats.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace infera::events {

struct NatsOptions {
  std::string url = "nats://127.0.0.1:4222";  // --nats-server: nats://host:port[,nats://...]
  int64_t reconnect_wait_ms = 200;
  int64_t request_timeout_ms = 2000;   // JetStream API calls and publish acks
  std::function<void()> on_reconnect;  // called on a libnats thread; keep it short
  std::string name;                    // the connection's name on the server ("": none)
  // An asynchronous error of a subscription (NATS_SLOW_CONSUMER: messages were
  // dropped); called on a libnats thread, keep it short. Null: ignored.
  std::function<void(natsSubscription* sub, natsStatus s)> on_async_error;
};

// What the router reads of the stream at subscribe time (doc/snapshot.md §6.4).
struct NatsStreamPosition {
  uint64_t first_seq = 0;   // the oldest message still held (last + 1 when empty)
  uint64_t last_seq = 0;    // 0: nothing was ever stored
  uint64_t created_ns = 0;  // the stream's creation time (unix ns): a recreated stream differs
};

// --nats-stream-max-bytes / --nats-stream-max-msgs (Infera's defaults).
struct NatsStreamLimits {
  int64_t max_bytes = int64_t{256} << 20;
  int64_t max_msgs = 1'000'000;
};

class NatsConnection {
 public:
  static absl::StatusOr<std::unique_ptr<NatsConnection>> Connect(NatsOptions options);
  ~NatsConnection();
  NatsConnection(const NatsConnection&) = delete;
  NatsConnection& operator=(const NatsConnection&) = delete;

  bool connected() const;
  natsConnection* conn() const { return nc_; }
  jsCtx* js() const { return js_; }
  int64_t request_timeout_ms() const { return options_.request_timeout_ms; }

  absl::Status EnsureStream(const NatsStreamLimits& limits);
  // The stream's first and last sequence numbers and its creation time.
  absl::StatusOr<NatsStreamPosition> StreamPosition();
  // The Infera-Seq header of the last message on `subject`; nullopt: none stored.
  absl::StatusOr<std::optional<uint64_t>> LastEngineSeq(const std::string& subject);

 private:
  explicit NatsConnection(NatsOptions options) : options_(std::move(options)) {}
  static void OnReconnected(natsConnection* nc, void* closure);
  static void OnAsyncError(natsConnection* nc, natsSubscription* sub, natsStatus s, void* closure);

  NatsOptions options_;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
};

// Drains `*sub` (its last callback has returned when this returns), or unsubscribes
// it when the connection is down and the drain cannot run, then destroys it and sets
// it to null. Null: nothing to do.
void DestroySubscription(natsSubscription*& sub, int64_t drain_timeout_ms);

// "what: <libnats status text> (<JetStream error code>)".
absl::Status NatsError(const std::string& what, natsStatus s, int js_error = 0);
// The Infera-Seq header of a message; nullopt when missing or not a decimal number.
std::optional<uint64_t> EngineSeqHeader(natsMsg* msg);

}  // namespace infera::events
