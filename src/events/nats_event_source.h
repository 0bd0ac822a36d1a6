// NatsEventSource: the router's KvEventSource for --kv-event-transport nats
// (architecture §15, doc/nats-transport.md "Consumer").
//
// One JetStream consumer over stream INFERA_KV_EVENTS (subjects infera.kv.events.>):
// an ordered, ephemeral push consumer, DeliverAll, so a starting router replays the
// whole stream before it reports ready. Each message's subject names its target
// (base64url(worker_id), dp_rank), its Infera-Seq header the engine's sequence number,
// its payload the engine's msgpack batch, decoded and applied by the same
// StreamApplier as the ZMQ ingestor. Per target, as over ZMQ (SequenceTracker):
//   next -> applied; duplicate -> dropped; seq 0 again -> restart: view cleared, then
//   applied; a gap -> counted and the view cleared (the relay already replayed what
//   the engine's socket still had: what is missing from the stream is lost), then
//   applied; a first batch that is not seq 0 -> applied, view not complete.
// Messages of targets discovery has not added yet are held per subject (bounded by
// max_pending_bytes; a restart at seq 0 drops the subject's older ones) and applied
// when the target is added, so discovery order does not matter.
// The stream sequence of the last message handled is kept: a subscription made after
// a failed first one starts from the next one; after a reconnect libnats resets the
// ordered consumer itself from there (anything delivered twice is dropped).
//
// Readiness: Replaying() is true until the consumer has handled the stream up to its
// last sequence as of the subscription (or the stream was empty), or ready_timeout_ms
// passed without that (NATS unreachable; logged).
//
// Thread-safety: every public method may be called from any thread. Messages are
// handled on libnats's delivery thread under mu_; the index lock is taken inside.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "base/mutex.h"
#include "core/types.h"
#include "event_wire/nats_connection.h"
#include "events/kv_event_source.h"
#include "events/shared_kv_index.h"
#include "events/stream_applier.h"

namespace infera::events {

struct NatsSourceOptions {
  NatsOptions nats;
  NatsStreamLimits limits;  // used only when the router creates the stream
  int64_t ready_timeout_ms = 30'000;
  size_t max_pending_bytes = size_t{64} << 20;  // held for targets not added yet
  int retry_interval_ms = 200;                  // subscribe retries while NATS is unreachable
  // The ready timeout's and the log limiter's time; nullptr: the process's steady clock
  // (log/steady_clock.h). The router passes its injected clock.
  const core::Clock* clock = nullptr;
};

class NatsEventSource final : public KvEventSource {
 public:
  // REQUIRES: `index` outlives the source.
  NatsEventSource(SharedKvIndex& index, NatsSourceOptions options);
  ~NatsEventSource() override;
  NatsEventSource(const NatsEventSource&) = delete;
  NatsEventSource& operator=(const NatsEventSource&) = delete;

  core::TargetId AddTarget(const IngestTarget& target) override;
  void RemoveTarget(const core::TargetKey& key) override;
  std::optional<core::TargetId> FindTarget(const core::TargetKey& key) const override;
  const KvEventCounters& counters() const override { return counters_; }
  bool Replaying() const override { return !ready_.load(); }

 private:
  struct Target : StreamState {
    IngestTarget spec;
    core::TargetId id = 0;
    bool alive = true;  // guarded by the index lock
    StreamTargetRef ref() const { return {spec, id, alive}; }
  };
  struct Held {
    uint64_t seq;
    std::string payload;
  };

  void Run();
  bool Subscribe();
  void DestroySubscription();
  static void OnMessage(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure);
  void HandleMessage(natsMsg* msg);
  void Handle(Target& t, uint64_t seq, std::span<const uint8_t> payload);
  void Hold(const std::string& subject, uint64_t seq, std::span<const uint8_t> payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const NatsSourceOptions options_;
  KvEventCounters counters_;
  WriterPriorityMutex& index_mu_;
  core::KvIndex& index_ ABSL_GUARDED_BY(index_mu_);
  const core::Clock& clock_;
  log::RateLimitedLog log_;  // per-message lines (restarts, gaps, bad batches)
  StreamApplier applier_;

  std::unique_ptr<NatsConnection> nc_;
  natsSubscription* sub_ = nullptr;  // Run() only

  mutable base::Mutex mu_;  // guards everything below
  std::map<std::string, std::unique_ptr<Target>> targets_ ABSL_GUARDED_BY(mu_);  // by subject
  std::map<std::string, std::deque<Held>> pending_ ABSL_GUARDED_BY(mu_);         // by subject
  size_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_stream_seq_ ABSL_GUARDED_BY(mu_) = 0;  // of the last message handled
  // The stream's last seq when subscribed.
  std::optional<uint64_t> ready_at_seq_ ABSL_GUARDED_BY(mu_);

  std::atomic<bool> ready_{false};
  base::Mutex run_mu_;
  base::CondVar run_cv_;
  bool stop_ ABSL_GUARDED_BY(run_mu_) = false;
  std::thread thread_;
};

}  // namespace infera::events
