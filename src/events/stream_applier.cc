#include "events/stream_applier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <string>

namespace infera::events {

bool StreamApplier::Apply(StreamState& s, const StreamTargetRef& target, uint64_t seq,
                          std::span<const uint8_t> payload) {
  const bool stream_start = !s.seq.last() && seq == 0;
  s.seq.Advance(seq);
  absl::Status decoded = DecodeEventBatch(payload, s.scratch);
  if (!decoded.ok()) {
    counters_.decode_errors.fetch_add(1, std::memory_order_relaxed);
    const std::string name = target.spec.key.ToString();
    log_.Warn("kv events: undecodable batch|" + name, "kv events: {} seq {}: {}", name, seq,
              std::string(decoded.message()));
    return false;
  }
  // A batch names its DP rank (doc/data-parallel.md): one of another rank never goes
  // into this rank's view (that rank's own stream carries it).
  if (s.scratch.dp_rank && *s.scratch.dp_rank != static_cast<int64_t>(target.spec.key.dp_rank)) {
    if (!s.rank_mismatch) {
      s.rank_mismatch = true;
      spdlog::warn(
          "kv events: {} received a batch of DP rank {}: not applied to this rank's view "
          "(is the record's dp_rank or kv_events_endpoint right?)",
          target.spec.key.ToString(), *s.scratch.dp_rank);
    }
    return true;
  }
  const bool was_complete = s.complete || stream_start;
  ApplyStats stats;
  bool inconsistent = false;
  // In slices: the lock is released between two, so a reader waits for one slice at
  // most, never for a whole batch (a 1.1M-block batch held it for seconds).
  BatchCursor cursor;
  // Room for what a slice can insert: at most the batch's stored blocks. (Growing for
  // a whole slice of 4,096 sized every target's engine map for 4,096 entries more than
  // its view: ~76 KiB per target, 31 B per block in view at 4,096 targets x 2,441
  // blocks, doc/perf-scale.md "Session 14".)
  size_t stored = 0;
  for (const DecodedEvent& e : s.scratch.events) {
    if (e.type == EventType::kStored) stored += e.hash_count;
  }
  const size_t room = std::clamp<size_t>(stored, 1, slice_units_);
  for (bool done = false; !done;) {
    // A table the slice would have to grow is rebuilt first under the shared lock
    // (readers go on), then swapped in (core::KvIndex::PrepareGrowth). Other writers
    // (ingestion shards) wait for this writer's turn meanwhile, not on the lock.
    std::lock_guard<std::mutex> turn(mu_.writer_turn());
    core::GrowthPlan growth;
    {
      ReaderLock lock(mu_);
      if (!target.alive) return true;
      growth = index_.PrepareGrowth(target.id, room);
    }
    WriterLock lock(mu_);
    if (!target.alive) return true;
    if (!growth.empty()) index_.InstallGrowth(growth);
    done = ApplyEventBatchSlice(index_, target.id, s.scratch, s.apply_state, cursor, slice_units_,
                                stats);
    if (!done) continue;
    // A parent the view must know (it saw the whole stream) but does not: events were
    // lost somewhere. Not when block sizes differ: then parents are never mapped.
    inconsistent = stats.unknown_parents > 0 && was_complete && !s.block_size_mismatch &&
                   stats.block_size_mismatches == 0;
    if (inconsistent) index_.ApplyCleared(target.id);
  }
  s.scratch.ReleaseIfLarge();
  counters_.batches.fetch_add(1, std::memory_order_relaxed);
  counters_.events.fetch_add(stats.events, std::memory_order_relaxed);
  counters_.skipped_events.fetch_add(stats.skipped_events, std::memory_order_relaxed);
  counters_.blocks_stored.fetch_add(stats.blocks_stored, std::memory_order_relaxed);
  counters_.blocks_removed.fetch_add(stats.blocks_removed, std::memory_order_relaxed);
  counters_.cleared.fetch_add(stats.cleared, std::memory_order_relaxed);
  counters_.unknown_parents.fetch_add(stats.unknown_parents, std::memory_order_relaxed);
  counters_.evicted_parents.fetch_add(stats.evicted_parents, std::memory_order_relaxed);
  counters_.block_size_mismatches.fetch_add(stats.block_size_mismatches, std::memory_order_relaxed);
  if (stats.block_size_mismatches > 0 && !s.block_size_mismatch) {
    s.block_size_mismatch = true;
    spdlog::warn(
        "kv events: {} sends block_size {} but is registered with {}; its blocks will not "
        "match the router's hashes",
        target.spec.key.ToString(), stats.mismatched_block_size, target.spec.block_size);
  }
  if (inconsistent) {
    counters_.resyncs.fetch_add(1, std::memory_order_relaxed);
    s.complete = false;
  } else if (stream_start || stats.cleared > 0) {
    s.complete = true;
  }
  return true;
}

void StreamApplier::Clear(StreamState& s, const StreamTargetRef& target) {
  {
    WriterLock lock(mu_);
    if (target.alive) index_.ApplyCleared(target.id);
  }
  counters_.resyncs.fetch_add(1, std::memory_order_relaxed);
  s.complete = false;
}

}  // namespace infera::events
