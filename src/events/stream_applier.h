// StreamApplier: applies one target's ordered KV-event batches to the router's index,
// shared by every KvEventSource (ZMQ ingestor, NATS source), so both decode, apply,
// count and judge completeness the same way (doc/kv-events.md "Sequence tracking").
//
// A StreamState is what one followed stream keeps between batches. Apply():
//   - advances the sequence tracker to `seq`,
//   - decodes the payload outside the lock (a bad payload is counted, logged and never
//     partly applied: the caller resyncs),
//   - skips a batch whose DP rank is another than the target's (logged once),
//   - applies it under the index's exclusive lock unless the target is gone (`alive`,
//     guarded by the same lock, is false), in slices of `slice_units` units of index
//     work: the lock is released between slices, so readers never wait for more than
//     one slice of a big batch (doc/kv-events.md "Concurrency"),
//   - clears the view when a BlockStored names a parent a complete view must know,
//   - keeps `complete`: true after the stream's seq 0 or an AllBlocksCleared.
// Clear() empties the view (a resync) and marks it incomplete. Per-batch warnings go
// through the source's RateLimitedLog (a malformed publisher cannot flood the log).
//
// Thread-safety: a StreamState belongs to one thread at a time; the index is guarded by
// `mu` as SharedKvIndex documents.
#pragma once

#include <cstdint>
#include <span>

#include "core/kv_index.h"
#include "core/types.h"
#include "events/event_applier.h"
#include "events/event_decoder.h"
#include "events/kv_event_source.h"
#include "events/sequence_tracker.h"
#include "events/writer_priority_mutex.h"
#include "log/rate_limited_log.h"

namespace infera::events {

struct StreamState {
  SequenceTracker seq;
  TargetApplyState apply_state;
  DecodedBatch scratch;
  bool complete = false;
  bool block_size_mismatch = false;
  bool rank_mismatch = false;  // a batch of another DP rank was seen (logged once)
};

// One target's place in the index.
struct StreamTargetRef {
  const IngestTarget& spec;
  core::TargetId id;
  const bool& alive;  // guarded by mu
};

class StreamApplier {
 public:
  // REQUIRES: every reference outlives the applier; slice_units > 0.
  StreamApplier(WriterPriorityMutex& mu, core::KvIndex& index, KvEventCounters& counters,
                log::RateLimitedLog& log, size_t slice_units = kDefaultSliceUnits)
      : mu_(mu), index_(index), counters_(counters), log_(log), slice_units_(slice_units) {}

  // Returns false when the payload does not decode (the caller resyncs).
  bool Apply(StreamState& s, const StreamTargetRef& target, uint64_t seq,
             std::span<const uint8_t> payload);
  void Clear(StreamState& s, const StreamTargetRef& target);

 private:
  WriterPriorityMutex& mu_;
  core::KvIndex& index_ ABSL_GUARDED_BY(mu_);
  KvEventCounters& counters_;
  log::RateLimitedLog& log_;
  const size_t slice_units_;
};

}  // namespace infera::events
