// NatsEventSource's KV-view snapshots (doc/snapshot.md §6.4): the restore before the
// first subscription, the stream check, and the periodic and final writes.
#include <spdlog/spdlog.h>

#include <chrono>
#include <utility>

#include "core/hashing.h"
#include "event_wire/nats_subject.h"
#include "events/nats_event_source.h"

namespace infera::events {

std::optional<std::string> NatsStreamRefusal(uint64_t snapshot_stream_created_ns,
                                             uint64_t begin_stream_seq,
                                             const NatsStreamPosition& stream) {
  if (stream.created_ns != snapshot_stream_created_ns) {
    return "stream created differs (" + std::to_string(snapshot_stream_created_ns) +
           " in the snapshot, " + std::to_string(stream.created_ns) + " now)";
  }
  if (begin_stream_seq + 1 < stream.first_seq) {
    return "needs stream seq " + std::to_string(begin_stream_seq + 1) + ", first is " +
           std::to_string(stream.first_seq);
  }
  return std::nullopt;
}

// --- Loading (§6.1, §6.4) ---

void NatsEventSource::RegisterRecords() {
  base::MutexLock lock(mu_);
  {
    // Record i gets id i here and in the staging index (both fresh, the same AddTarget
    // calls in the same order); discovery's AddTarget of a restored key returns it.
    WriterLock index_lock(index_mu_);
    if (!index_.Targets().empty()) {
      spdlog::error("kv-snapshot: the index already holds targets: snapshot not restored");
      return;
    }
    for (const RestoredTarget& r : options_.load->records()) index_.AddTarget(r.key, r.block_size);
  }
  for (const RestoredTarget& r : options_.load->records()) restored_[r.key.ToString()] = r;
  load_ = options_.load;
  load_stream_created_ns_ = load_->header().nats_stream_created_ns;
  load_begin_stream_seq_ = load_->footer().begin_stream_seq;
  check_stream_ = true;
  building_.store(true);
}

void NatsEventSource::BuildAndSwap() {
  std::vector<core::TargetId> failed;
  core::KvIndex staging = load_->Build(failed);
  load_.reset();
  size_t followed = 0;
  {
    base::MutexLock lock(mu_);
    const size_t staged = staging.Targets().size();  // the records' ids: 0..staged-1
    bool salted = false;
    {
      ReaderLock index_lock(index_mu_);
      salted = index_.SaltedTraffic();
      AddTargetsAddedSince(index_, staged, staging);
    }
    for (auto& [subject, t] : targets_) {
      staging.AddTarget(t->spec.key, t->spec.block_size);
      staging.SetMaxBlocks(t->id, t->spec.max_blocks);
      if (t->clear_on_swap) staging.ApplyCleared(t->id);
      t->clear_on_swap = false;
    }
    auto claim = [&](const core::TargetKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = targets_.find(KvEventSubject(key));
      if (it == targets_.end()) return false;
      it->second->complete = false;  // claimed: the view is empty, not the record's
      return true;
    };
    DropFailedRecords(staging, failed, restored_, claim);
    if (salted) staging.NoteSaltedTraffic();
    {
      WriterLock index_lock(index_mu_);
      index_ = std::move(staging);
    }
    unclaimed_deadline_ns_ =
        restored_.empty() ? -1 : clock_.NowNs() + options_.unclaimed_after_ms * 1'000'000;
    followed = targets_.size();
    building_.store(false);  // under mu_: a ClaimRestored after this sees the swapped index
  }
  { base::MutexLock lock(run_mu_); }
  run_cv_.NotifyAll();
  // `staging` holds the former index of the records' empty targets: freed off-lock.
  spdlog::info("kv-snapshot: staging index swapped in; {} targets followed", followed);
}

void NatsEventSource::WaitForBuild() {
  base::MutexLock lock(run_mu_);
  run_cv_.Wait(run_mu_, [this] { return !building_.load(); });
}

void NatsEventSource::ClaimRestored(Target& t) {
  auto r = restored_.find(t.spec.key.ToString());
  if (r == restored_.end()) return;
  const RestoredTarget record = r->second;
  restored_.erase(r);
  if (record.block_size != t.spec.block_size) {
    if (building_.load()) {
      t.clear_on_swap = true;  // its view is in the staging index
    } else {
      index_.ApplyCleared(t.id);
    }
    if (options_.snapshot_stats) options_.snapshot_stats->refused_block_size.fetch_add(1);
    return;
  }
  if (!record.position.has_position) return;  // it had applied nothing: loses nothing
  // What the record holds comes again from begin_stream_seq + 1: dropped as duplicates.
  t.seq.Advance(record.position.last_seq);
  t.complete = record.position.complete;
  t.stream_seq = record.position.stream_seq;
}

void NatsEventSource::CheckStream(const NatsStreamPosition& stream) {
  check_stream_ = false;
  const std::optional<std::string> refusal =
      NatsStreamRefusal(load_stream_created_ns_, load_begin_stream_seq_, stream);
  if (!refusal) {
    last_stream_seq_ = load_begin_stream_seq_;
    spdlog::info(
        "kv-snapshot: the stream continues the snapshot: consuming from stream seq {} "
        "(first {}, last {})",
        load_begin_stream_seq_ + 1, stream.first_seq, stream.last_seq);
    return;
  }
  spdlog::warn("kv-snapshot: refused {}: {}; full replay", options_.snapshot.path, *refusal);
  if (options_.snapshot_stats) {
    // The file was counted loaded when it was opened: its outcome is this one instead.
    options_.snapshot_stats->loads[static_cast<size_t>(LoadResult::kLoaded)].fetch_sub(1);
    options_.snapshot_stats->loads[static_cast<size_t>(LoadResult::kRefusedStream)].fetch_add(1);
  }
  // Nothing was applied yet: every view is the record's, and the stream replays from
  // its start onto empty ones.
  WriterLock index_lock(index_mu_);
  for (auto& [subject, t] : targets_) {
    index_.ApplyCleared(t->id);
    t->seq.Reset();
    t->complete = false;
    t->stream_seq = 0;
  }
  for (const auto& [name, record] : restored_) {
    if (std::optional<core::TargetId> id = index_.FindTarget(record.key)) index_.RemoveTarget(*id);
  }
  restored_.clear();
  unclaimed_deadline_ns_ = -1;
}

void NatsEventSource::DropUnclaimed() {
  unclaimed_deadline_ns_ = -1;
  size_t dropped = 0;
  {
    base::MutexLock lock(mu_);
    WriterLock index_lock(index_mu_);
    for (const auto& [name, record] : restored_) {
      if (std::optional<core::TargetId> id = index_.FindTarget(record.key))
        index_.RemoveTarget(*id);
    }
    dropped = restored_.size();
    restored_.clear();
  }
  if (dropped == 0) return;
  if (options_.snapshot_stats) options_.snapshot_stats->refused_unclaimed.fetch_add(dropped);
  spdlog::info("kv-snapshot: {} restored target(s) not added by discovery within {} ms: dropped",
               dropped, options_.unclaimed_after_ms);
}

// --- Writing (§5, §6.4) ---

void NatsEventSource::SnapshotTick() {
  if (snapshotter_ == nullptr) return;
  {
    base::MutexLock lock(run_mu_);
    if (final_done_) return;
  }
  const bool final = final_requested_.load();
  bool subscribed = false;
  {
    base::MutexLock lock(mu_);
    subscribed = stream_created_ns_ != 0;
  }
  if (!subscribed) {
    // Views not tied to a stream position yet: the file at the path stays.
    if (final) {
      spdlog::info("kv-snapshot: final snapshot not written: the stream was never read ({} kept)",
                   options_.snapshot.path);
      FinalDone();
    }
    return;
  }
  if (!final && !snapshotter_->Due(clock_.NowNs())) return;
  WriteSnapshot(final);
}

void NatsEventSource::WriteSnapshot(bool final) {
  SnapshotHeader header{.hash_scheme = core::kHashSchemeVersion,
                        .writer_instance = instance_,
                        .transport = SnapshotTransport::kNats,
                        .fleet_id = options_.snapshot.fleet_id};
  std::vector<std::string> subjects;
  uint64_t begin = 0, distinct = 0;
  {
    base::MutexLock lock(mu_);
    if (final) frozen_ = true;  // views as they are now; the stream keeps the rest
    begin = last_stream_seq_;
    header.nats_stream_created_ns = stream_created_ns_;
    subjects.reserve(targets_.size());
    for (const auto& [subject, t] : targets_) subjects.push_back(subject);
    ReaderLock index_lock(index_mu_);
    header.salted_traffic = index_.SaltedTraffic();
    distinct = index_.DistinctHashCount();
  }
  snapshotter_->Begin(header, distinct, clock_.NowNs(), begin);
  size_t next = 0;
  bool abandoned = false;
  while (next < subjects.size()) {
    {
      base::MutexLock lock(run_mu_);
      // A periodic snapshot gives way to the final one (the next loop turn writes it).
      abandoned = stop_ || (!final && final_requested_.load());
    }
    if (abandoned) break;
    std::vector<SnapshotRecord> step = ExportStep(subjects, next);
    if (!step.empty()) snapshotter_->Push(std::move(step));  // waits when the disk is behind
  }
  if (abandoned) {
    snapshotter_->Abort(clock_.NowNs());
  } else {
    snapshotter_->End(clock_.NowNs());
  }
  if (final) FinalDone();
}

std::vector<SnapshotRecord> NatsEventSource::ExportStep(const std::vector<std::string>& subjects,
                                                        size_t& next) {
  constexpr size_t kStepBlocks = 16'384;
  std::vector<SnapshotRecord> step;
  size_t blocks = 0;
  // Under mu_ no message is applied: each record is its target at one instant.
  base::MutexLock lock(mu_);
  ReaderLock index_lock(index_mu_);
  while (next < subjects.size() && blocks < kStepBlocks) {
    auto it = targets_.find(subjects[next++]);
    if (it == targets_.end()) continue;  // removed since the snapshot began
    const Target& t = *it->second;
    SnapshotRecord& r = step.emplace_back();
    r.key = t.spec.key;
    r.block_size = t.spec.block_size;
    const std::optional<uint64_t> last = t.seq.last();
    r.position = {.has_position = last.has_value(),
                  .complete = t.complete,
                  .last_seq = last.value_or(0),
                  .stream_seq = last ? t.stream_seq : 0};
    index_.ExportView(t.id, r.view);
    blocks += r.view.blocks.size();
  }
  return step;
}

void NatsEventSource::FinalDone() {
  {
    base::MutexLock lock(run_mu_);
    final_done_ = true;
  }
  run_cv_.NotifyAll();
}

void NatsEventSource::RequestFinalSnapshot() {
  if (snapshotter_ == nullptr) return;
  final_requested_.store(true);
  { base::MutexLock lock(run_mu_); }
  run_cv_.NotifyAll();
}

bool NatsEventSource::WaitFinalSnapshot(int64_t timeout_ms) {
  if (snapshotter_ == nullptr) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  {
    base::MutexLock lock(run_mu_);
    while (!final_done_) {
      if (!run_cv_.WaitUntil(run_mu_, deadline) && !final_done_) return false;
    }
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return snapshotter_->WaitIdle(std::max<int64_t>(0, left.count()));
}

}  // namespace infera::events
