// KvSnapshotter: the writing side of KV-view snapshots (doc/snapshot.md §5), and the
// start-up load (§6.1).
//
// The ingestion thread exports views step by step under the index lock held shared and
// hands each step to this class; a writer thread of its own streams the steps into a
// SnapshotWriter (temp file, fsync, rename). The queue between them is bounded
// (kQueueSteps): when the disk is slower than the export, the ingestion thread waits
// (ingestion is delayed, picks never). One cycle at a time: Begin, Push..., End or
// Abort.
//
// KvSnapshotLoad checks the file and builds a staging KvIndex from it, off-lock; the
// ingestor swaps it into the router's index under one exclusive hold and verifies the
// restored targets' positions (§6.2) when discovery adds them.
//
// Thread-safety: Begin/Push/End/Abort/Due from one thread (the ingestion thread);
// stats() and WaitIdle from any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "events/kv_snapshot.h"
#include "events/kv_snapshot_stream.h"
#include "events/shared_kv_index.h"

namespace infera::events {

// What /metrics shows of snapshots (§10).
struct KvSnapshotStats {
  std::atomic<uint64_t> writes_ok{0};
  std::atomic<uint64_t> writes_error{0};
  std::atomic<uint64_t> writes_skipped{0};
  std::atomic<int64_t> last_write_unix_ms{0};
  std::atomic<uint64_t> last_write_bytes{0};
  std::atomic<uint64_t> last_write_blocks{0};
  std::atomic<uint64_t> last_write_duration_us{0};
  std::atomic<uint64_t> loads[kLoadResultCount] = {};
  std::atomic<int64_t> load_age_ms{0};
  std::atomic<uint64_t> restore_us{0};
  std::atomic<uint64_t> restored_blocks{0};
  std::atomic<uint64_t> refused_block_size{0};
  std::atomic<uint64_t> refused_unclaimed{0};
  std::atomic<uint64_t> refused_corrupt{0};
  // verify_total{result}: ok, epoch, gap, empty, failed, no_replay_ok, no_replay_resync.
  std::atomic<uint64_t> verify[7] = {};
  // Runs on the writer's thread after each file written (renamed to the path): the peer
  // server checks it there, off its offer path (doc/snapshot.md §9.1). Set before the
  // writer starts.
  std::function<void()> after_write;
};
enum class VerifyResult : uint8_t {
  kOk,
  kEpoch,
  kGap,
  kEmpty,
  kFailed,
  kNoReplayOk,
  kNoReplayResync
};
std::string_view VerifyResultName(VerifyResult result);

// A restored target's record, waiting for discovery to add it (§6.1 step 4).
struct RestoredTarget {
  core::TargetKey key;
  uint32_t block_size = 0;
  SnapshotPosition position;
};
// By TargetKey::ToString().
using RestoredTargets = std::map<std::string, RestoredTarget>;

// §6.1 in two parts, so that the verify replays run while the staging index builds
// (§8.1 step 3; the ingestor's IngestorOptions::load): Open checks the file and reads
// its records' positions (no block is read); Build restores every record into a fresh
// staging index, in the file's order, so that record i gets TargetId i (an index given
// the same AddTarget calls in the same order gives the same ids).
//
// Thread-safety: Open on any thread; Build once, on any thread, no lock (nothing else
// sees the staging index); records() from any thread.
class KvSnapshotLoad {
 public:
  // Checks `options.path` (every refusal of §7), counts and logs the outcome; null when
  // there is nothing to restore (off, absent, refused).
  // `checked`: the file at the path as a peer fetch checked it a moment ago (the same
  // checks; doc/snapshot.md §9.1), taken instead of mapping and checking it again;
  // `stream`: that fetch's build of the same bytes as they arrived (Build takes it when
  // it restored exactly the checked file's records).
  static std::unique_ptr<KvSnapshotLoad> Open(const KvSnapshotOptions& options,
                                              SnapshotTransport transport,
                                              std::shared_ptr<KvSnapshotStats> stats,
                                              std::optional<SnapshotReader> checked = {},
                                              std::unique_ptr<SnapshotStreamBuild> stream = {});
  // The records, in the file's order.
  const std::vector<RestoredTarget>& records() const { return records_; }
  // The file's header and footer (NATS: the stream's creation time and
  // begin_stream_seq, doc/snapshot.md §6.4); valid after Build too.
  const SnapshotHeader& header() const { return reader_.header(); }
  const SnapshotFooter& footer() const { return reader_.footer(); }
  // Restores every record into the returned index and unmaps the file. A record whose
  // view does not restore keeps its target, empty, and its id goes into `failed`
  // (refused_targets_total{reason="corrupt"}). Logs where the time went. With a
  // streamed build (Open's `stream`): waits for it and returns its index when its
  // records are the checked file's, else builds from the file as without one.
  core::KvIndex Build(std::vector<core::TargetId>& failed);
  // Tests: runs at the start of Build, on its thread (holds a build back).
  void set_before_build(std::function<void()> hook) { before_build_ = std::move(hook); }

 private:
  KvSnapshotLoad(SnapshotReader reader, std::shared_ptr<KvSnapshotStats> stats, int64_t start_us);
  // The streamed build's index when it is the checked file's (none: build from the file).
  std::optional<core::KvIndex> TakeStream(std::vector<core::TargetId>& failed);
  void Restored(const std::vector<core::TargetId>& failed, uint64_t blocks, const char* how);

  SnapshotReader reader_;
  std::shared_ptr<KvSnapshotStats> stats_;
  std::vector<RestoredTarget> records_;
  const int64_t start_us_;  // when Open began (restore_seconds counts from it)
  int64_t checked_us_ = 0;  // map, checksum, parse
  std::function<void()> before_build_;
  std::unique_ptr<SnapshotStreamBuild> stream_;
};

// The staging build's end (§6.1 "Built"): adds to `staging` the targets `live` gained
// after the records' `staged` targets (ids >= staged), in id order, so they get the
// same ids there. REQUIRES: nothing was removed from either index since the records
// were registered; the caller holds `live`'s lock.
void AddTargetsAddedSince(const core::KvIndex& live, size_t staged, core::KvIndex& staging);

// The staging build's end, before the swap (§6.1 "Built"): each record whose build failed
// is forgotten (`restored`); its target stays in `staging` with an empty view when a
// followed target claims it (`claim(key)` returns true and marks that view incomplete),
// and is removed otherwise. The caller holds the lock guarding `restored`.
void DropFailedRecords(core::KvIndex& staging, const std::vector<core::TargetId>& failed,
                       RestoredTargets& restored,
                       const std::function<bool(const core::TargetKey& key)>& claim);

// §6.1 in one go (tests): Open, Build, and the staging index swapped into `index` under
// one exclusive hold; records that did not restore are removed. Returns the restored
// targets (empty when nothing was loaded).
RestoredTargets LoadKvSnapshot(const KvSnapshotOptions& options, SnapshotTransport transport,
                               SharedKvIndex& index, KvSnapshotStats& stats);

class KvSnapshotter {
 public:
  static constexpr size_t kQueueSteps = 4;

  KvSnapshotter(KvSnapshotOptions options, std::shared_ptr<KvSnapshotStats> stats,
                std::unique_ptr<SnapshotFs> fs = nullptr);
  ~KvSnapshotter();
  KvSnapshotter(const KvSnapshotter&) = delete;
  KvSnapshotter& operator=(const KvSnapshotter&) = delete;

  // Whether a periodic snapshot should start now (steady ns; interval after the last
  // cycle ended). A tick while a cycle runs is counted as skipped.
  bool Due(int64_t now_ns);
  // `begin_stream_seq`: the footer's (NATS, §4.4; 0 for ZMQ).
  void Begin(const SnapshotHeader& header, uint64_t distinct_hash_count, int64_t now_ns,
             uint64_t begin_stream_seq = 0);
  // Blocks while kQueueSteps steps wait for the writer.
  void Push(std::vector<SnapshotRecord> step);
  void End(int64_t now_ns);
  // Drops the cycle in progress (its temp file unlinked).
  void Abort(int64_t now_ns);
  bool InCycle() const { return in_cycle_; }
  // Waits until the writer has handled everything pushed so far; false at the timeout.
  bool WaitIdle(int64_t timeout_ms);

  const KvSnapshotOptions& options() const { return options_; }
  KvSnapshotStats& stats() { return *stats_; }

 private:
  struct Item {
    enum Kind : uint8_t { kBegin, kStep, kEnd, kAbort } kind = kEnd;
    SnapshotHeader header = {};
    uint64_t distinct_hash_count = 0;
    uint64_t begin_stream_seq = 0;
    std::vector<SnapshotRecord> step = {};
  };
  void Enqueue(Item item);
  void WriterLoop();
  void Handle(Item& item, std::unique_ptr<SnapshotWriter>& writer);

  const KvSnapshotOptions options_;
  std::shared_ptr<KvSnapshotStats> stats_;
  std::unique_ptr<SnapshotFs> fs_;
  const int pid_;
  bool in_cycle_ = false;       // ingestion thread
  int64_t next_due_ns_ = -1;    // ingestion thread; -1: first call sets it
  int64_t cycle_start_ns_ = 0;  // ingestion thread

  // Writer thread only: the cycle being written.
  int64_t writer_begin_us_ = 0;
  uint64_t writer_distinct_ = 0;
  uint64_t writer_begin_stream_seq_ = 0;
  absl::Status writer_status_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // guarded by mu_
  bool busy_ = false;       // guarded by mu_: the writer handles an item
  bool stop_ = false;       // guarded by mu_
  std::thread thread_;
};

}  // namespace infera::events
