// EventPublisher (engine side): publishes KV-event batches the way vLLM and SGLang do.
//
//   PUB socket     every batch is one message of 3 frames:
//                  [topic (utf-8), seq (8-byte big-endian u64, 0, 1, 2, ...), payload]
//   replay ROUTER  (optional) a request [identity, empty, start_seq (8B BE)] is answered
//                  with [identity, empty, seq (8B BE), payload] for every buffered batch
//                  with seq >= start_seq, oldest first, then the end marker
//                  [identity, empty, -1 (8B BE signed, all 0xff), empty]. Requests of
//                  another frame count are ignored, as vLLM does.
//   buffer         the last `buffer_batches` payloads (vLLM: 10,000).
//
// Endpoints: "tcp://*:5557" binds; a port of 0 ("tcp://127.0.0.1:0") lets the OS pick
// one; pub_endpoint() / replay_endpoint() report the bound addresses. Unlike vLLM, this
// publisher always binds (engines bind, subscribers connect).
//
// Thread-safety: Publish() may be called from any thread; batches get consecutive
// sequence numbers in the order Publish() calls acquire the internal mutex. A
// background thread serves replay requests. The destructor stops it.
//
// Example:
//   auto pub = EventPublisher::Create({.pub_endpoint = "tcp://*:5557",
//                                      .replay_endpoint = "tcp://*:5558",
//                                      .topic = "kv-events"});
//   if (!pub.ok()) return pub.status();
//   (*pub)->Publish(EventBatch{.ts = now_s, .events = {Stored{...}}});
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "engine_events/event_encoder.h"

namespace infera::events {

struct PublisherOptions {
  std::string pub_endpoint = "tcp://*:5557";
  std::string replay_endpoint{};  // empty: no replay socket
  std::string topic{};            // Infera uses "kv-events"; vLLM's default is ""
  WireShape shape = WireShape::kVllm;
  size_t buffer_batches = 10'000;
  int send_hwm = 100'000;
};

class EventPublisher {
 public:
  static absl::StatusOr<std::unique_ptr<EventPublisher>> Create(PublisherOptions options);
  ~EventPublisher();
  EventPublisher(const EventPublisher&) = delete;
  EventPublisher& operator=(const EventPublisher&) = delete;

  // Encodes and publishes one batch; returns its sequence number.
  uint64_t Publish(const EventBatch& batch);
  // Publishes an already encoded payload (tests, relays); returns its sequence number.
  uint64_t PublishPayload(std::string payload);

  // Fault injection for tests: the next batch gets a sequence number and enters the
  // replay buffer but is not sent on the PUB socket (a gap a subscriber must replay).
  uint64_t PublishPayloadSkippingLive(std::string payload);
  // Fault injection for tests: sends the buffered batch `seq` again on the PUB socket
  // with its old sequence number (a duplicate / out-of-order message). False when the
  // batch is no longer buffered.
  bool ResendForTest(uint64_t seq);
  // Fault injection for tests: closes the PUB socket and binds a new one at the same
  // address, so subscribers see their connection drop and come back (the replay socket
  // stays). With `restart`, the publisher also forgets its sequence and buffer, as a
  // restarted engine does, and buffers `buffered` as seqs 0, 1, ... (not sent live) before
  // the new PUB socket is bound. False when the address could not be bound again.
  bool ReopenForTest(bool restart = false, const std::vector<std::string>& buffered = {});

  // Bound addresses ("tcp://127.0.0.1:40123"); replay_endpoint() is empty without one.
  const std::string& pub_endpoint() const { return pub_bound_; }
  const std::string& replay_endpoint() const { return replay_bound_; }
  const PublisherOptions& options() const { return options_; }
  // Sequence number the next batch will get.
  uint64_t next_seq() const;

 private:
  explicit EventPublisher(PublisherOptions options);
  // Binds the sockets; runs before any other thread can see the publisher, so it
  // sets up pub_ without mu_.
  absl::Status Start() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // A PUB socket with the options' settings, bound to `endpoint`. Throws zmq::error_t.
  zmq::socket_t BindPub(const std::string& endpoint);
  uint64_t PublishLocked(std::shared_ptr<const std::string> payload, bool send_live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLocked(uint64_t seq, const std::string& payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReplayLoop();
  void ServeReplay();

  PublisherOptions options_;
  zmq::context_t ctx_;
  std::string pub_bound_;
  std::string replay_bound_;

  mutable base::Mutex mu_;
  zmq::socket_t pub_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::pair<uint64_t, std::shared_ptr<const std::string>>> buffer_ ABSL_GUARDED_BY(mu_);

  zmq::socket_t replay_;  // used only by replay_thread_ after Start()
  std::atomic<bool> stop_{false};
  std::thread replay_thread_;
};

}  // namespace infera::events
