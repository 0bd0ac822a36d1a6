#include "events/kv_snapshotter.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/hashing.h"
#include "log/steady_clock.h"

namespace infera::events {
namespace {

using log::SteadyUs;
using log::ThreadCpuUs;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string_view VerifyResultName(VerifyResult result) {
  static constexpr std::string_view kNames[] = {
      "ok", "epoch", "gap", "empty", "failed", "no_replay_ok", "no_replay_resync"};
  return kNames[static_cast<size_t>(result)];
}

std::unique_ptr<KvSnapshotLoad> KvSnapshotLoad::Open(const KvSnapshotOptions& options,
                                                     SnapshotTransport transport,
                                                     std::shared_ptr<KvSnapshotStats> stats,
                                                     std::optional<SnapshotReader> checked,
                                                     std::unique_ptr<SnapshotStreamBuild> stream) {
  if (!options.enabled()) return nullptr;
  PosixSnapshotFs fs;
  const size_t stale = RemoveStaleSnapshotTemps(fs, options.path, getpid());
  if (stale > 0) spdlog::info("kv-snapshot: removed {} stale temp file(s)", stale);
  const int64_t start_us = SteadyUs();
  const bool prechecked = checked.has_value();
  SnapshotReader reader = prechecked
                              ? std::move(*checked)
                              : SnapshotReader::Open(fs, options.path,
                                                     {.hash_scheme = core::kHashSchemeVersion,
                                                      .transport = transport,
                                                      .fleet_id = options.fleet_id,
                                                      .now_unix_ms = WallMs(),
                                                      .max_age_s = options.max_age_s});
  stats->loads[static_cast<size_t>(reader.result())].fetch_add(1);
  if (reader.result() == LoadResult::kAbsent) {
    spdlog::info("kv-snapshot: no snapshot at {}; full replay", options.path);
    return nullptr;
  }
  if (reader.result() != LoadResult::kLoaded) {
    spdlog::warn("kv-snapshot: refused {}: {}; full replay", options.path, reader.detail());
    return nullptr;
  }
  const int64_t age_ms = WallMs() - reader.header().created_unix_ms;
  stats->load_age_ms.store(age_ms);
  spdlog::info("kv-snapshot: loaded {}: {} targets, {} blocks, age {} s{}", options.path,
               reader.footer().target_count, reader.footer().block_count, age_ms / 1000,
               prechecked ? " (checked by the peer fetch)" : "");
  std::unique_ptr<KvSnapshotLoad> load(
      new KvSnapshotLoad(std::move(reader), std::move(stats), start_us));
  load->stream_ = std::move(stream);
  return load;
}

KvSnapshotLoad::KvSnapshotLoad(SnapshotReader reader, std::shared_ptr<KvSnapshotStats> stats,
                               int64_t start_us)
    : reader_(std::move(reader)), stats_(std::move(stats)), start_us_(start_us) {
  SnapshotRecord head;
  records_.reserve(reader_.record_count());
  for (size_t i = 0; i < reader_.record_count(); ++i) {
    reader_.ReadRecordHead(i, head);
    records_.push_back({head.key, head.block_size, head.position});
  }
  checked_us_ = SteadyUs() - start_us_;
}

std::optional<core::KvIndex> KvSnapshotLoad::TakeStream(std::vector<core::TargetId>& failed) {
  SnapshotStreamBuild::Result r = stream_->Finish();
  stream_.reset();  // its thread joined, its mapping unmapped
  const char* refused = !r.complete                             ? "incomplete"
                        : r.offsets != reader_.record_offsets() ? "not the checked file's records"
                                                                : nullptr;
  if (refused != nullptr) {
    spdlog::warn(
        "kv-snapshot: the build streamed during the fetch is {} ({}); building from the file",
        refused, r.error);
    return std::nullopt;
  }
  spdlog::info(
      "kv-snapshot: the build streamed during the fetch ended {:.3f} s after the last chunk "
      "(wall {:.3f} s, cpu {:.3f} s, of it waiting for chunks {:.3f} s)",
      r.after_last_byte_us / 1e6, r.wall_us / 1e6, r.cpu_us / 1e6, r.waited_us / 1e6);
  failed = std::move(r.failed);
  for (core::TargetId id : failed) {
    stats_->refused_corrupt.fetch_add(1);
    spdlog::warn("kv-snapshot: record of {} is inconsistent: not restored",
                 r.staging.Key(id).ToString());
  }
  Restored(failed, r.blocks, "streamed");
  return std::move(r.staging);
}

void KvSnapshotLoad::Restored(const std::vector<core::TargetId>& failed, uint64_t blocks,
                              const char* how) {
  reader_.Release();
  const int64_t took_us = SteadyUs() - start_us_;
  stats_->restore_us.store(static_cast<uint64_t>(took_us));
  stats_->restored_blocks.fetch_add(blocks);
  spdlog::info(
      "kv-snapshot: restored {} targets ({} blocks) in {:.3f} s after opening the file ({})",
      records_.size() - failed.size(), blocks, took_us / 1e6, how);
}

core::KvIndex KvSnapshotLoad::Build(std::vector<core::TargetId>& failed) {
  if (before_build_) before_build_();
  if (stream_ != nullptr) {
    if (std::optional<core::KvIndex> staging = TakeStream(failed)) return std::move(*staging);
  }
  const int64_t build_us = SteadyUs();
  const int64_t start_cpu_us = ThreadCpuUs();
  core::KvIndex staging;
  int64_t t = SteadyUs();
  staging.Reserve(reader_.footer().distinct_hash_count);
  const int64_t reserve_us = SteadyUs() - t;
  int64_t decode_us = 0, restore_us = 0;
  if (reader_.header().salted_traffic) staging.NoteSaltedTraffic();
  SnapshotRecord record;
  uint64_t blocks = 0;
  for (size_t i = 0; i < reader_.record_count(); ++i) {
    t = SteadyUs();
    reader_.ReadRecord(i, record);
    const int64_t decoded = SteadyUs();
    decode_us += decoded - t;
    core::TargetId id = 0;
    const bool ok = RestoreSnapshotRecord(staging, record, id);
    restore_us += SteadyUs() - decoded;
    if (!ok) {
      failed.push_back(id);
      stats_->refused_corrupt.fetch_add(1);
      spdlog::warn("kv-snapshot: record of {} is inconsistent: not restored",
                   record.key.ToString());
      continue;
    }
    blocks += record.view.blocks.size();
  }
  const std::string how = absl::StrFormat(
      "build %.3f s, cpu %.3f s; check %.3f s, reserve %.3f s, decode %.3f s, restore %.3f s",
      (SteadyUs() - build_us) / 1e6, (ThreadCpuUs() - start_cpu_us) / 1e6, checked_us_ / 1e6,
      reserve_us / 1e6, decode_us / 1e6, restore_us / 1e6);
  Restored(failed, blocks, how.c_str());
  return staging;
}

void DropFailedRecords(core::KvIndex& staging, const std::vector<core::TargetId>& failed,
                       RestoredTargets& restored,
                       const std::function<bool(const core::TargetKey& key)>& claim) {
  for (core::TargetId id : failed) {
    const core::TargetKey key = staging.Key(id);
    restored.erase(key.ToString());  // an unclaimed record's target goes now
    if (!claim(key)) staging.RemoveTarget(id);
  }
}

void AddTargetsAddedSince(const core::KvIndex& live, size_t staged, core::KvIndex& staging) {
  std::vector<core::TargetId> ids = live.Targets();
  std::sort(ids.begin(), ids.end());
  for (core::TargetId id : ids) {
    if (id < staged) continue;
    if (staging.AddTarget(live.Key(id), live.BlockSize(id)) != id) std::abort();
  }
}

RestoredTargets LoadKvSnapshot(const KvSnapshotOptions& options, SnapshotTransport transport,
                               SharedKvIndex& index, KvSnapshotStats& stats) {
  RestoredTargets restored;
  // The caller owns `stats`: a shared_ptr that owns nothing.
  std::unique_ptr<KvSnapshotLoad> load = KvSnapshotLoad::Open(
      options, transport, std::shared_ptr<KvSnapshotStats>(std::shared_ptr<void>(), &stats));
  if (load == nullptr) return restored;
  std::vector<core::TargetId> failed;
  core::KvIndex staging = load->Build(failed);
  for (const RestoredTarget& r : load->records()) restored[r.key.ToString()] = r;
  for (core::TargetId id : failed) {
    restored.erase(staging.Key(id).ToString());
    staging.RemoveTarget(id);
  }
  index.WithWrite([&](core::KvIndex& live) { live = std::move(staging); });
  // `staging` now holds the router's former (empty) index: freed here, off-lock.
  return restored;
}

KvSnapshotter::KvSnapshotter(KvSnapshotOptions options, std::shared_ptr<KvSnapshotStats> stats,
                             std::unique_ptr<SnapshotFs> fs)
    : options_(std::move(options)),
      stats_(std::move(stats)),
      fs_(fs != nullptr ? std::move(fs) : std::make_unique<PosixSnapshotFs>()),
      pid_(getpid()) {
  thread_ = std::thread([this] { WriterLoop(); });
}

KvSnapshotter::~KvSnapshotter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool KvSnapshotter::Due(int64_t now_ns) {
  const int64_t interval_ns = options_.interval_s * 1'000'000'000;
  if (next_due_ns_ < 0) next_due_ns_ = now_ns + interval_ns;
  if (options_.interval_s == 0 || now_ns < next_due_ns_) return false;
  if (in_cycle_) {
    stats_->writes_skipped.fetch_add(1);
    next_due_ns_ = now_ns + interval_ns;
    return false;
  }
  return true;
}

void KvSnapshotter::Begin(const SnapshotHeader& header, uint64_t distinct_hash_count,
                          int64_t now_ns, uint64_t begin_stream_seq) {
  in_cycle_ = true;
  cycle_start_ns_ = now_ns;
  SnapshotHeader h = header;
  h.created_unix_ms = WallMs();
  Item item{.kind = Item::kBegin};
  item.header = std::move(h);
  item.distinct_hash_count = distinct_hash_count;
  item.begin_stream_seq = begin_stream_seq;
  Enqueue(std::move(item));
}

void KvSnapshotter::Push(std::vector<SnapshotRecord> step) {
  Item item{.kind = Item::kStep};
  item.step = std::move(step);
  Enqueue(std::move(item));
}

void KvSnapshotter::End(int64_t now_ns) {
  Enqueue(Item{.kind = Item::kEnd});
  in_cycle_ = false;
  next_due_ns_ = now_ns + options_.interval_s * 1'000'000'000;
}

void KvSnapshotter::Abort(int64_t now_ns) {
  if (!in_cycle_) return;
  Enqueue(Item{.kind = Item::kAbort});
  in_cycle_ = false;
  next_due_ns_ = now_ns + options_.interval_s * 1'000'000'000;
}

bool KvSnapshotter::WaitIdle(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                      [&] { return queue_.empty() && !busy_; });
}

void KvSnapshotter::Enqueue(Item item) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.size() < kQueueSteps || stop_; });
  queue_.push_back(std::move(item));
  cv_.notify_all();
}

void KvSnapshotter::WriterLoop() {
  std::unique_ptr<SnapshotWriter> writer;
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || stop_; });
      // At exit an unfinished write is abandoned (the writer unlinks its temp file).
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    cv_.notify_all();  // a slot freed
    Handle(item, writer);
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

void KvSnapshotter::Handle(Item& item, std::unique_ptr<SnapshotWriter>& writer) {
  int64_t& begin_us = writer_begin_us_;
  uint64_t& distinct = writer_distinct_;
  absl::Status& status = writer_status_;
  switch (item.kind) {
    case Item::kBegin:
      writer = std::make_unique<SnapshotWriter>(*fs_, options_.path, pid_);
      begin_us = SteadyUs();
      distinct = item.distinct_hash_count;
      writer_begin_stream_seq_ = item.begin_stream_seq;
      status = writer->Begin(item.header);
      return;
    case Item::kStep:
      for (const SnapshotRecord& r : item.step) {
        if (writer == nullptr || !status.ok()) return;
        status = writer->AddRecord(r);
      }
      return;
    case Item::kAbort:
      writer.reset();  // unlinks the temp file
      return;
    case Item::kEnd:
      if (writer == nullptr) return;
      if (status.ok()) status = writer->Finish(distinct, writer_begin_stream_seq_);
      if (status.ok()) {
        stats_->writes_ok.fetch_add(1);
        stats_->last_write_unix_ms.store(WallMs());
        stats_->last_write_bytes.store(writer->bytes_written());
        stats_->last_write_blocks.store(writer->block_count());
        stats_->last_write_duration_us.store(static_cast<uint64_t>(SteadyUs() - begin_us));
        writer.reset();
        if (stats_->after_write) stats_->after_write();
      } else {
        stats_->writes_error.fetch_add(1);
        spdlog::warn("kv-snapshot: snapshot write failed: {}", std::string(status.message()));
      }
      writer.reset();
      return;
  }
}

}  // namespace infera::events
