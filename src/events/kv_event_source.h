// KvEventSource: a transport that keeps the router's KV index in step with the
// engines' caches (doc/kv-events.md, doc/router-pipeline.md "Events").
//
// The index belongs to the router (a SharedKvIndex); a source is handed it at
// construction and writes into it. A source knows targets (one worker DP rank each):
// AddTarget registers the target in the index at once and starts following its
// events; RemoveTarget stops following and drops its view. Implementations:
//   KvEventIngestor (ZMQ SUB + replay, kv_event_ingestor.h)   --kv-event-transport zmq
//   NatsEventSource (JetStream consumer, nats_event_source.h)   --kv-event-transport nats
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "core/types.h"

namespace infera::events {

struct KvSnapshotStats;  // kv_snapshotter.h

// Counters of a source (names in kv_event_ingestor.h "Metrics").
struct KvEventCounters {
  std::atomic<uint64_t> messages{0};
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> skipped_events{0};
  std::atomic<uint64_t> blocks_stored{0};
  std::atomic<uint64_t> blocks_removed{0};
  std::atomic<uint64_t> cleared{0};
  std::atomic<uint64_t> gaps{0};
  std::atomic<uint64_t> replays{0};
  std::atomic<uint64_t> replayed_batches{0};
  std::atomic<uint64_t> replay_failures{0};
  std::atomic<uint64_t> replays_skipped{0};
  std::atomic<uint64_t> resyncs{0};
  std::atomic<uint64_t> restarts{0};
  std::atomic<uint64_t> decode_errors{0};
  std::atomic<uint64_t> unknown_parents{0};
  std::atomic<uint64_t> evicted_parents{0};
  std::atomic<uint64_t> dropped{0};
  std::atomic<uint64_t> block_size_mismatches{0};
};

// One target to follow: a worker DP rank and where its events come from.
struct IngestTarget {
  core::TargetKey key{};
  std::string events_endpoint{};  // "tcp://host:5557" (already offset by the rank); empty:
                                  // the target is indexed but has no event stream
  std::string replay_endpoint{};  // "" when the engine has no replay socket
  uint32_t block_size = 16;
  std::string topic{};    // subscription prefix; "" = every topic
  size_t max_blocks = 0;  // bound of the target's view (core::KvIndex::SetMaxBlocks); 0: none

  friend bool operator==(const IngestTarget&, const IngestTarget&) = default;
};

class KvEventSource {
 public:
  virtual ~KvEventSource() = default;

  // Adds the target to the index (at once) and follows its events. Re-adding the
  // same key with the same settings is a no-op; with other settings the target is
  // replaced and its view starts empty. Returns the target's index id.
  virtual core::TargetId AddTarget(const IngestTarget& target) = 0;
  // Stops following the target and removes it from the index. Unknown keys are ignored.
  virtual void RemoveTarget(const core::TargetKey& key) = 0;
  virtual std::optional<core::TargetId> FindTarget(const core::TargetKey& key) const = 0;
  // What the source counted (rendered on the router's /metrics).
  virtual const KvEventCounters& counters() const = 0;
  // True while the source rebuilds its views at start (a target's first replay, the
  // JetStream catch-up): the router's /health says "starting" (--ready-after-replay).
  virtual bool Replaying() const { return false; }
  // Descriptors the source holds for its subscriptions now (thread-safe, cheap): the
  // HTTP server leaves them out of its derived connection cap (ServerOptions::other_fds).
  virtual int64_t DescriptorsHeld() const { return 0; }

  // KV-view snapshots (doc/snapshot.md): what the source counted (rendered on /metrics),
  // null when it writes none. At SIGTERM, beside the drain (§5.3): RequestFinalSnapshot
  // makes the source freeze its views and write them; WaitFinalSnapshot waits for the
  // file (false at the timeout). A source without snapshots does nothing (true).
  virtual const KvSnapshotStats* snapshot_stats() const { return nullptr; }
  virtual void RequestFinalSnapshot() {}
  virtual bool WaitFinalSnapshot(int64_t /*timeout_ms*/) { return true; }
};

}  // namespace infera::events
