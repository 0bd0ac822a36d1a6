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
// Snapshots (doc/snapshot.md §6.4; NatsSourceOptions::snapshot): the views are written
// periodically and at SIGTERM by Run()'s thread, step by step, each step under mu_ (so
// no message is applied meanwhile) and the index lock held shared; the footer's
// begin_stream_seq is the stream sequence of the last message handled when the
// snapshot began. A file accepted at start (NatsSourceOptions::load) is built into a
// staging index on Run()'s thread before the first subscription (records registered in
// the index at once, so discovery's AddTarget of a restored key gets its record's id)
// and swapped in; the consumer then starts at begin_stream_seq + 1 and each restored
// target drops what its record holds (Infera-Seq <= the record's last_seq). A stream
// recreated since (another `created`) or truncated past begin_stream_seq + 1 refuses
// the file (refused_stream): the restored views are cleared and the stream replayed
// from its start.
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
#include "events/kv_snapshotter.h"
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
  // KV-view snapshots (doc/snapshot.md §6.4): written when snapshot.path is set; `load`:
  // a file KvSnapshotLoad::Open accepted (REQUIRES: an index that never held a target).
  KvSnapshotOptions snapshot = {};
  std::shared_ptr<KvSnapshotStats> snapshot_stats = nullptr;
  std::shared_ptr<KvSnapshotLoad> load = nullptr;
  // Restored targets discovery has not added this long after the swap are removed
  // (refused_targets_total{reason="unclaimed"}).
  int64_t unclaimed_after_ms = 10'000;
};

// Why a snapshot cannot continue on the stream as it is now (refused_stream, §6.4), or
// nullopt when it can: the stream was recreated (another creation time) or no longer
// holds begin_stream_seq + 1.
std::optional<std::string> NatsStreamRefusal(uint64_t snapshot_stream_created_ns,
                                             uint64_t begin_stream_seq,
                                             const NatsStreamPosition& stream);

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
  int64_t DescriptorsHeld() const override { return snapshotter_ != nullptr ? 2 : 0; }

  const KvSnapshotStats* snapshot_stats() const override {
    return snapshotter_ != nullptr ? &snapshotter_->stats() : options_.snapshot_stats.get();
  }
  void RequestFinalSnapshot() override;
  bool WaitFinalSnapshot(int64_t timeout_ms) override;

 private:
  struct Target : StreamState {
    IngestTarget spec;
    core::TargetId id = 0;
    bool alive = true;           // guarded by the index lock
    uint64_t stream_seq = 0;     // of the last message applied (the record's stream_seq)
    bool clear_on_swap = false;  // restored with another block size: cleared at the swap
    StreamTargetRef ref() const { return {spec, id, alive}; }
  };
  struct Held {
    uint64_t seq;
    uint64_t stream_seq;
    std::string payload;
  };

  void Run();
  bool Subscribe();
  void DestroySubscription();
  static void OnMessage(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure);
  void HandleMessage(natsMsg* msg);
  void Handle(Target& t, uint64_t seq, uint64_t stream_seq, std::span<const uint8_t> payload);
  void Hold(const std::string& subject, uint64_t seq, uint64_t stream_seq,
            std::span<const uint8_t> payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StopOrFinal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) {
    return stop_ || (final_requested_.load() && !final_done_);
  }

  // Snapshots (nats_event_source_snapshot.cc).
  void RegisterRecords();
  void BuildAndSwap();
  void ClaimRestored(Target& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, index_mu_);
  // At the first stream check after a load: continue from begin_stream_seq, or refuse.
  void CheckStream(const NatsStreamPosition& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropUnclaimed();
  void SnapshotTick();
  void WriteSnapshot(bool final);
  // Exports whole targets of `subjects` from `next` on, up to a step's blocks.
  std::vector<SnapshotRecord> ExportStep(const std::vector<std::string>& subjects, size_t& next);
  void FinalDone();
  void WaitForBuild();

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

  // Snapshots: the writer (null when off); the accepted file until its first stream
  // check; the records not claimed by AddTarget yet.
  std::unique_ptr<KvSnapshotter> snapshotter_;
  uint64_t instance_ = 0;
  std::shared_ptr<KvSnapshotLoad> load_;  // Run() only, until the swap
  // The accepted file's stream (header) and position (footer), checked once (§6.4).
  uint64_t load_stream_created_ns_ = 0;
  uint64_t load_begin_stream_seq_ = 0;
  bool check_stream_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t stream_created_ns_ ABSL_GUARDED_BY(mu_) = 0;  // of the stream followed
  RestoredTargets restored_ ABSL_GUARDED_BY(mu_);
  bool frozen_ ABSL_GUARDED_BY(mu_) = false;  // the final snapshot: nothing applied after
  int64_t unclaimed_deadline_ns_ = -1;        // Run() only; -1: none
  // True until the staging index is swapped in; RemoveTarget (and an AddTarget that
  // replaces a target) wait for it: an id freed meanwhile would differ between indexes.
  std::atomic<bool> building_{false};
  std::atomic<bool> final_requested_{false};

  std::atomic<bool> ready_{false};
  base::Mutex run_mu_;
  base::CondVar run_cv_;
  bool stop_ ABSL_GUARDED_BY(run_mu_) = false;
  bool final_done_ ABSL_GUARDED_BY(run_mu_) = false;
  std::thread thread_;
};

}  // namespace infera::events
