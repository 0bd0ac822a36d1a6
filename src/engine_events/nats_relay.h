// NatsRelay: the engine-side relay of --kv-relay nats (infera-register; architecture
// §15, doc/nats-transport.md "Relay").
//
// Per target (one engine DP rank) it subscribes to the engine's ZMQ KV-event stream and
// republishes every batch, payload unchanged, to JetStream subject
// infera.kv.events.<b64url(worker_id)>.<dp_rank> with header Infera-Seq (the engine's
// sequence number) and Nats-Msg-Id (<relay instance>.<epoch>.<dp_rank>.<seq>: JetStream
// drops the relay's own resends within its duplicate window). The stream is created
// when missing (NatsConnection::EnsureStream). Per target the relay publishes in the
// engine's order and fills holes from the engine's replay socket first:
//   - at start (and after every NATS reconnect) it reads the Infera-Seq of the last
//     message JetStream holds for the subject, L, and asks the replay socket for
//     L+1.. (0.. when none): what JetStream missed while the relay or NATS was down;
//   - a gap in the live stream (seq > last + 1) is replayed the same way before the
//     message that revealed it; a replay that fails leaves the gap (the router resyncs);
//   - after the SUB lost its engine (ZMQ monitor), a seq that does not continue the
//     stream means the engine restarted (or batches were lost): the relay resends the
//     engine's whole buffer from 0 (the router drops what it has, or rebuilds at seq 0);
//   - seq 0 after others is an engine restart: published as it comes (the router
//     clears the view), the Nats-Msg-Id epoch bumped so ids stay unique; a first live
//     seq at or below L with nothing newer to replay is an engine that restarted while
//     the relay was down: the relay republishes its buffer from 0; at start, when
//     nothing newer than L was replayed, the engine's buffer is probed at L at once;
//   - after the SUB reconnected (monitor: connected after a disconnect), with no live
//     message yet, the relay probes the replay socket from the last seq relayed: a
//     buffer that does not hold that batch (an idle restarted engine's is empty) is an
//     engine restart, seen without waiting for a live batch that may never come;
//   - a restart whose resend does not start at seq 0 goes out behind the relay's clear
//     marker (seq 0, one AllBlocksCleared): the router clears its view all the same;
//   - while NATS is unreachable batches queue (max_queued per target, oldest dropped
//     and counted) and are published in order once it is back.
//
// Thread-safety: Start/Stop from one thread; counters() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/types.h"
#include "event_wire/nats_connection.h"

namespace infera::events {

struct RelayTarget {
  core::TargetKey key;
  std::string events_endpoint;  // tcp://host:port of this rank
  std::string replay_endpoint;  // "" when the engine has none
  std::string topic;            // ZMQ subscription prefix ("" = every topic)
};

struct NatsRelayOptions {
  NatsOptions nats;
  NatsStreamLimits limits;
  int replay_timeout_ms = 2000;
  size_t max_queued = 100'000;  // per target, while NATS is unreachable
  int poll_interval_ms = 20;
};

struct NatsRelayCounters {
  std::atomic<uint64_t> received{0};   // live ZMQ messages
  std::atomic<uint64_t> published{0};  // batches acknowledged by JetStream
  std::atomic<uint64_t> replayed{0};   // batches fetched from the replay socket
  std::atomic<uint64_t> gaps{0};       // live gaps seen
  std::atomic<uint64_t> replay_failures{0};
  std::atomic<uint64_t> publish_failures{0};
  std::atomic<uint64_t> dropped{0};   // queue overflow, malformed or duplicate input
  std::atomic<uint64_t> restarts{0};  // engine restarts seen
};

class NatsRelay {
 public:
  NatsRelay(std::vector<RelayTarget> targets, NatsRelayOptions options);
  ~NatsRelay();
  NatsRelay(const NatsRelay&) = delete;
  NatsRelay& operator=(const NatsRelay&) = delete;

  // Connects (in the background when NATS is not up yet) and starts relaying.
  absl::Status Start();
  void Stop();
  const NatsRelayCounters& counters() const { return counters_; }

 private:
  struct Target;
  void Run();

  std::vector<RelayTarget> specs_;
  NatsRelayOptions options_;
  NatsRelayCounters counters_;
  std::unique_ptr<NatsConnection> nc_;
  std::atomic<bool> reconnected_{true};  // check the stream's position (start, reconnect)
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace infera::events
