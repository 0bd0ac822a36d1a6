// KvEventIngestor: subscribes to every target's KV-event stream over ZMQ and keeps the
// router's core::KvIndex in step with the engines' caches (doc/kv-events.md).
//
// One target = one worker's data-parallel rank (its events on port P + rank). Discovery
// adds and removes targets at run time; each gets a ZMQ SUB socket (topic filter,
// ZMQ's own reconnect with exponential backoff) read by one ingestion thread, which:
//   - decodes each payload (a bad payload is counted and never partly applied),
//   - tracks the publisher's sequence numbers; on a gap asks the engine's replay
//     ROUTER over a DEALER for the missing batches (architecture §4). A replay runs
//     asynchronously on the same thread: the target's live messages are held (in
//     order) until it ends, while every other target's events keep being applied.
//     At most max_concurrent_replays run at once (others wait their turn); after a
//     failed replay the target replays again only after a backoff (doubling from
//     replay_backoff_initial_ms up to replay_backoff_max_ms), and gaps in between
//     resync it instead,
//   - clears the target's view ("resync") when the gap cannot be closed (no replay
//     socket, buffer too short, timeout, undecodable batch), the publisher restarted
//     (sequence back to 0, or a reconnect after which the stream does not continue:
//     at the reconnect the replay socket is probed for the batch applied last, so an
//     engine that restarted and publishes nothing is noticed too),
//     or a BlockStored names a parent the view must know but does not.
//
// Snapshots (doc/snapshot.md; IngestorOptions::snapshot): the same thread exports the
// views step by step between epoll rounds under the shared lock (a writer thread
// writes the file), and a target restored from a snapshot is verified by a replay from
// its record's seq instead of a replay from 0.
//
// Concurrency (doc/kv-events.md "Concurrency"): the index lives in a SharedKvIndex (the
// router's, or one the ingestor owns) behind a writer-priority reader/writer lock. The
// ingestion thread decodes outside the lock and applies one batch at a time under a
// short exclusive lock; request threads read through WithIndex(), which holds the lock
// shared for the duration of the callback. Readers never wait for decoding or socket
// I/O, only for the application of one batch.
//
// Thread-safety: every public method may be called from any thread.
//
// Metrics (KvEventCounters; the server renders them on /metrics):
//   infera_kv_events_messages_total          live messages received
//   infera_kv_events_batches_total           batches applied (live and replayed)
//   infera_kv_events_events_total            events applied
//   infera_kv_events_skipped_events_total    events that are not prefix KV
//   infera_kv_events_blocks_stored_total     engine blocks stored
//   infera_kv_events_blocks_removed_total    blocks removed
//   infera_kv_events_cleared_total           AllBlocksCleared events
//   infera_kv_events_gaps_total              sequence gaps seen
//   infera_kv_events_replays_total           replay requests sent
//   infera_kv_events_replayed_batches_total  batches received through replay
//   infera_kv_events_replay_failures_total   replays that timed out or were malformed
//   infera_kv_events_replays_skipped_total   gaps not replayed (the target's replay backs off)
//   infera_kv_events_resyncs_total           views cleared to rebuild from new events
//   infera_kv_events_restarts_total          publisher restarts detected
//   infera_kv_events_decode_errors_total     undecodable payloads or malformed frames
//   infera_kv_events_unknown_parents_total   BlockStored with a parent the view lacks
//   infera_kv_events_evicted_parents_total   ... that the view's bound may have evicted (skipped)
//   infera_kv_events_dropped_total           duplicate / out-of-order messages dropped
//   infera_kv_events_block_size_mismatches_total  BlockStored with another block size
//
// Example:
//   KvEventIngestor ingestor;
//   ingestor.AddTarget({.key = {"10.0.0.5:30000", 0},
//                       .events_endpoint = "tcp://10.0.0.5:5557",
//                       .replay_endpoint = "tcp://10.0.0.5:5558",
//                       .block_size = 16, .topic = "kv-events"});
//   size_t hits = ingestor.WithIndex([&](const core::KvIndex& index) { ... });
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "core/kv_index.h"
#include "core/types.h"
#include "events/kv_event_source.h"
#include "events/kv_snapshotter.h"
#include "events/shared_kv_index.h"
#include "events/stream_applier.h"
#include "events/writer_priority_mutex.h"
#include "log/rate_limited_log.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace infera::events {

struct IngestorOptions {
  int replay_timeout_ms = 2000;          // whole replay, request to end marker
  int max_concurrent_replays = 4;        // replays in flight at once (others wait)
  int replay_backoff_initial_ms = 1000;  // no replay this long after a failed one...
  int replay_backoff_max_ms = 30'000;    // ...doubling per failure in a row up to this
  // Live messages a target holds while its replay runs; past it the replay is
  // abandoned (a failure) and the view rebuilt from the stream.
  size_t max_held_messages = 10'000;
  int reconnect_ivl_ms = 100;         // ZMQ_RECONNECT_IVL
  int reconnect_ivl_max_ms = 5000;    // ZMQ_RECONNECT_IVL_MAX (exponential backoff cap)
  int poll_interval_ms = 20;          // how often the thread picks up added/removed targets
  int max_messages_per_wakeup = 256;  // per target, so one busy stream cannot starve others
  // ZMQ_RCVHWM of each SUB socket: the live messages the router buffers per target
  // (doc/kv-events.md "Transport"). Past it libzmq stops reading the connection, the
  // backlog waits in the engine's PUB queue, and what that queue drops comes back as
  // a seq gap, closed by replay. 100,000 let one slow stretch grow the router by
  // ~40 MiB that the allocator kept (doc/soak.md, session 8).
  int receive_hwm = 16;
  // On the first message of a stream that does not start at 0, replay from 0 to build
  // a complete view when the engine still buffers its whole history.
  bool initial_replay = true;
  // When a target is added, replay everything its engine still buffers before its live
  // stream (warm restart, doc/nats-transport.md "Readiness"); Replaying() is true until
  // every such replay ended (done, failed or timed out).
  bool replay_on_add = false;
  // Units of index work per hold of the index lock (event_applier.h).
  size_t slice_units = kDefaultSliceUnits;
  // Per-event log lines: at most a few per target and interval, then a summary
  // (log/rate_limited_log.h).
  log::RateLimitOptions log_limit = {};
  // The ingestor's only time source: replay deadlines, replay backoff, the poll
  // timeout and the log limiter's intervals. nullptr: the process's steady clock
  // (log/steady_clock.h); the router passes its injected clock.
  const core::Clock* clock = nullptr;
  // KV-view snapshots (doc/snapshot.md): written when snapshot.path is set, on this
  // thread step by step (§5.1). `restored`: the targets LoadKvSnapshot put into the
  // index; each is verified (§6.2) instead of replayed from 0 when it is added.
  KvSnapshotOptions snapshot = {};
  std::shared_ptr<KvSnapshotStats> snapshot_stats = nullptr;
  std::shared_ptr<const RestoredTargets> restored = nullptr;
  // A file KvSnapshotLoad::Open accepted (instead of `restored`): the ingestor registers
  // its records in the index at once, builds the staging index on a thread of its own
  // and swaps it in under one exclusive hold, while the records' verify replays run;
  // what they bring is applied after the swap (§6.1, §8.1 step 3). REQUIRES: an index
  // that never held a target. Until the swap Replaying() is true, and RemoveTarget (and
  // AddTarget replacing a target) wait for it.
  std::shared_ptr<KvSnapshotLoad> load = nullptr;
  int max_concurrent_verify_replays = 128;  // verify replays, apart from the gap replays
  // Restored targets discovery has not added this long after the ingestor started are
  // removed from the index (refused_targets_total{reason="unclaimed"}, §6.1 step 5).
  int64_t unclaimed_after_ms = 10'000;
};

// What the ingestor knows of one target (admin views, tests).
struct IngestTargetStatus {
  core::TargetKey key;
  core::TargetId id = 0;
  std::optional<uint64_t> last_seq;
  // True when the view is believed to equal the engine's: everything since the
  // publisher's seq 0 or its last AllBlocksCleared has been applied, without a resync.
  bool complete = false;
};

class KvEventIngestor final : public KvEventSource {
 public:
  // Writes into `index` (the router's). REQUIRES: `index` outlives the ingestor.
  explicit KvEventIngestor(SharedKvIndex& index, IngestorOptions options = {});
  // Writes into an index of its own (tests, probes).
  explicit KvEventIngestor(IngestorOptions options = {});
  ~KvEventIngestor();
  KvEventIngestor(const KvEventIngestor&) = delete;
  KvEventIngestor& operator=(const KvEventIngestor&) = delete;

  // Adds a target (index entry at once; subscription on the ingestion thread).
  // Re-adding the same key with the same settings is a no-op; with other settings the
  // target is replaced and its view starts empty.
  core::TargetId AddTarget(const IngestTarget& target) override;
  // Removes a target, its subscription and its view. Unknown keys are ignored.
  void RemoveTarget(const core::TargetKey& key) override;
  std::optional<core::TargetId> FindTarget(const core::TargetKey& key) const override;

  // Runs f(const core::KvIndex&) under the shared lock and returns its result. Keep f
  // short (one request's matching): the ingestion thread waits for it to apply.
  // REQUIRES: f does not call back into this ingestor.
  template <class F>
  auto WithIndex(F&& f) const {
    ReaderLock lock(index_mu_);
    return f(static_cast<const core::KvIndex&>(index_));
  }

  // For readers that keep a reference, such as core::Selector (it holds a
  // const KvIndex&): the index itself. REQUIRES: every use happens while the caller
  // holds a ReadLock(), e.g. { auto lock = ingestor.ReadLock(); selector.Pick(...); }.
  const core::KvIndex& index() const { return index_; }
  [[nodiscard]] std::shared_lock<WriterPriorityMutex> ReadLock() const {
    return std::shared_lock<WriterPriorityMutex>(index_mu_);
  }

  const KvEventCounters& counters() const override { return counters_; }
  bool Replaying() const override {
    return building_.load() || initial_replays_pending_.load() > 0;
  }
  // kDescriptorsPerTarget per followed target plus two per replay slot (verify slots
  // included when snapshots are on) plus the snapshot writer's two.
  int64_t DescriptorsHeld() const override;
  // A target's SUB socket holds its TCP connection and its mailbox's eventfd; its
  // monitor and the monitor's reader hold a mailbox each (4,096 targets: ~16,400
  // descriptors, doc/perf-scale.md).
  static constexpr int64_t kDescriptorsPerTarget = 4;
  std::vector<IngestTargetStatus> TargetStatuses() const;

  // Snapshots (null stats when off). At SIGTERM: RequestFinalSnapshot makes the
  // ingestion thread stop reading, abandon a periodic snapshot and export every view;
  // WaitFinalSnapshot waits until it is written (false at the timeout).
  const KvSnapshotStats* snapshot_stats() const override {
    return snapshotter_ != nullptr ? &snapshotter_->stats() : options_.snapshot_stats.get();
  }
  void RequestFinalSnapshot() override;
  bool WaitFinalSnapshot(int64_t timeout_ms) override;

 private:
  struct Conn;
  struct Command {
    std::shared_ptr<Conn> conn;
    bool add = true;
  };
  enum class WatchKind : uint8_t { kSub, kMonitor, kReplay };
  // One socket registered with the ingestion thread's epoll (data.ptr).
  struct Watch {
    Conn* conn = nullptr;  // null: the target was removed
    WatchKind kind = WatchKind::kSub;
    int fd = -1;          // the socket's ZMQ_FD while registered
    bool queued = false;  // in ready_
  };

  void InitSnapshots();
  // IngestorOptions::load: the records registered, the build thread started; at its
  // end the staging index swapped in and what the build held back applied.
  void StartBuild();
  void SwapInStaging(const std::vector<std::shared_ptr<Conn>>& conns);
  void ReleaseDeferred(Conn& c);
  void WaitForBuild();
  core::TargetId AddLocked(IngestTarget spec, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu_);
  void Run();
  void RunLoop();
  void DrainCommands(std::vector<std::shared_ptr<Conn>>& conns);
  // Registers the socket of `kind` (if open) with the epoll set and queues it once;
  // Unwatch removes it (before the socket closes).
  void WatchSocket(Conn& c, WatchKind kind);
  void Unwatch(Conn& c, WatchKind kind);
  void Queue(Watch* w);
  static bool Readable(zmq::socket_t& s);
  void OpenSockets(Conn& c);
  void ReadMessages(Conn& c);
  void ReadMonitor(Conn& c);
  // The SUB reconnected after a disconnect: a probe of the replay socket at the seq
  // applied last (doc/kv-events.md §4 "Reconnect probe").
  void ProbeReconnected(Conn& c);
  void HandleLive(Conn& c, uint64_t seq, const void* payload, size_t size);
  void Process(Conn& c, uint64_t seq, const void* payload, size_t size);
  // Holds the message that revealed the gap and asks for batches from `from_seq`
  // (now, or when a replay slot frees up).
  void BeginReplay(Conn& c, uint64_t from_seq, uint64_t seq, const void* payload, size_t size);
  void StartReplay(Conn& c);
  void ReadReplay(Conn& c);
  // Ends the target's replay, then applies the messages held meanwhile.
  void FinishReplay(Conn& c, bool ok);
  // Applies the live messages held meanwhile (the first as a catch-up when asked).
  void ReleaseHeld(Conn& c, bool first_catch_up);
  void ApplyReplayed(Conn& c, uint64_t seq, const void* payload, size_t size);
  void EndInitialReplay(Conn& c);
  void StartWaitingReplays();
  bool ReplayAllowed(const Conn& c) const;
  void CatchUp(Conn& c, uint64_t seq, const void* payload, size_t size);
  void Apply(Conn& c, uint64_t seq, const void* payload, size_t size);
  void Resync(Conn& c);
  void PublishStatus(Conn& c);
  // Snapshots and verify replays (doc/snapshot.md §5.1, §6.2).
  void ClaimRestored(Conn& c, const RestoredTarget& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(index_mu_);
  bool SnapshotStep(const std::vector<std::shared_ptr<Conn>>& conns);
  void BeginSnapshot(const std::vector<std::shared_ptr<Conn>>& conns, int64_t now_ns);
  bool ExportStep();
  bool CheckVerify(Conn& c, uint64_t seq, const void* payload, size_t size);
  void CountVerify(Conn& c, VerifyResult result);
  void RestartFromZero(Conn& c);
  bool SlotFree(const Conn& c) const;
  void QueueReplay(Conn& c);
  void ReleaseSlot(Conn& c);
  void DropUnclaimed();

  const IngestorOptions options_;
  KvEventCounters counters_;
  std::unique_ptr<zmq::context_t> ctx_;  // outlives every socket
  // Replay DEALERs live in a context of their own: closing a socket makes libzmq's
  // reaper walk its context's inproc endpoints, which in ctx_ are one per SUB monitor
  // (4,104 at fleet scale, for each of 4,104 verify replays), and its I/O thread does
  // the replays' handshakes next to the subscriptions' (doc/snapshot.md §8.1).
  std::unique_ptr<zmq::context_t> replay_ctx_;

  std::unique_ptr<SharedKvIndex> owned_index_;  // when constructed without an index
  WriterPriorityMutex& index_mu_;               // guards index_ and Conn::alive
  core::KvIndex& index_ ABSL_GUARDED_BY(index_mu_);
  const core::Clock& clock_;
  log::RateLimitedLog log_;
  StreamApplier applier_;

  mutable base::Mutex registry_mu_;
  // By TargetKey::ToString().
  std::map<std::string, std::shared_ptr<Conn>> registry_ ABSL_GUARDED_BY(registry_mu_);
  std::deque<Command> commands_ ABSL_GUARDED_BY(registry_mu_);
  // Ingestion thread only: commands taken from commands_, at most kAddsPerRound adds
  // done per loop round (the rest wait in order for the next round).
  std::deque<Command> drained_;
  static constexpr int kAddsPerRound = 128;

  // Ingestion thread only: the epoll set of every socket, the sockets to read in the
  // next round (read and still readable, or just registered).
  int epoll_fd_ = -1;
  std::vector<Watch*> ready_;
  // Ingestion thread only: replays in flight, and targets waiting for a slot.
  int active_replays_ = 0;
  std::deque<Conn*> waiting_replays_;  // owned by RunLoop's list; removed with it
  // The targets whose replay socket is open (gap replays and verifies): the loop's
  // deadline checks walk these, not every target (4,104 per round at fleet scale).
  std::vector<Conn*> in_flight_;
  std::vector<Conn*> late_;  // scratch: this round's replays past their deadline
  int active_verifies_ = 0;
  // After a replay socket could not be made (EMFILE): no new replay before this.
  static constexpr int64_t kReplayPauseNs = 20'000'000;
  int64_t replay_pause_until_ns_ = 0;
  std::deque<Conn*> waiting_verifies_;

  // Snapshots: the writer (null when off), the targets of the export in progress
  // (ingestion thread), the restored records not yet claimed (registry_mu_).
  std::unique_ptr<KvSnapshotter> snapshotter_;
  std::vector<std::shared_ptr<Conn>> export_targets_;
  size_t export_next_ = 0;
  uint64_t instance_ = 0;
  RestoredTargets restored_ ABSL_GUARDED_BY(registry_mu_);
  int64_t unclaimed_deadline_ns_ = -1;  // ingestion thread; -1: nothing restored left
  // The staging build (IngestorOptions::load): its thread, its result (written before
  // build_done_), and the records' count (their ids are 0..n-1). building_ is true
  // until the swap; RemoveTarget waits on build_cv_ for it to turn false.
  std::shared_ptr<KvSnapshotLoad> load_;
  std::thread build_thread_;
  core::KvIndex staging_;
  std::vector<core::TargetId> build_failed_;
  std::atomic<bool> build_done_{false};
  std::atomic<bool> building_{false};
  std::mutex build_mu_;
  std::condition_variable build_cv_;
  std::atomic<bool> final_requested_{false};
  std::mutex final_mu_;
  std::condition_variable final_cv_;
  bool final_exported_ = false;  // guarded by final_mu_

  std::atomic<int> initial_replays_pending_{0};
  std::atomic<int64_t> followed_targets_{0};  // registry_.size(), for DescriptorsHeld
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace infera::events
