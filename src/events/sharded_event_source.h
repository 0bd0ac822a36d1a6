// ShardedKvEventSource: ZMQ event ingestion across cores (issue 27; doc/kv-events.md
// "Sharded ingestion", flag --kv-ingest-threads).
//
// N KvEventIngestor shards over the SAME SharedKvIndex, each with its own thread,
// epoll loop, ZMQ contexts (so its own libzmq I/O threads), subscriptions, replays and
// sequence tracking. A target belongs to the shard its key hashes to (ShardOf: a stable
// hash of TargetKey::ToString()), so each target has one writer at a time, which is
// all the index asks of concurrent writers (doc/index.md, doc/kv-events.md §5): the
// shards decode in parallel and apply slice by slice under the index's writer-priority
// lock, their slices interleaving. Re-adding or replacing a key goes to the same shard.
//
// What the router sees is one KvEventSource: AddTarget / RemoveTarget / FindTarget go
// to the owning shard; counters() are the shards' sums; Replaying() is true while any
// shard replays; DescriptorsHeld() is the sum. The replay slot limits
// (max_concurrent_replays, max_concurrent_verify_replays) are split between the shards
// (at least one each), so the engines see about as many replays at once as with one.
//
// Not supported yet: snapshots (IngestorOptions::snapshot / restored / load, i.e.
// --kv-snapshot-path, warm restart, peer join). Each ingestor writes and restores its
// own file today; across shards one snapshotter must be fed by all of them. The
// router's flags refuse --kv-ingest-threads > 1 with --kv-snapshot-path, and the
// constructor throws std::invalid_argument if given such options.
//
// Thread-safety: every public method may be called from any thread.
//
// Example:
//   SharedKvIndex index;
//   ShardedKvEventSource source(index, IngestorOptions{.replay_on_add = true}, 2);
//   source.AddTarget({.key = {"10.0.0.5:30000", 0}, .events_endpoint = "tcp://...:5557"});
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "events/kv_event_ingestor.h"
#include "events/kv_event_source.h"
#include "events/shared_kv_index.h"

namespace infera::events {

class ShardedKvEventSource final : public KvEventSource {
 public:
  // REQUIRES: shards >= 1; `index` outlives the source; no snapshot options.
  ShardedKvEventSource(SharedKvIndex& index, const IngestorOptions& options, size_t shards);
  ~ShardedKvEventSource() override;
  ShardedKvEventSource(const ShardedKvEventSource&) = delete;
  ShardedKvEventSource& operator=(const ShardedKvEventSource&) = delete;

  core::TargetId AddTarget(const IngestTarget& target) override;
  void RemoveTarget(const core::TargetKey& key) override;
  std::optional<core::TargetId> FindTarget(const core::TargetKey& key) const override;
  // The shards' sums as of this call (each field never goes backwards). The reference
  // stays valid; read it again through counters() for newer sums.
  const KvEventCounters& counters() const override;
  bool Replaying() const override;
  int64_t DescriptorsHeld() const override;
  // Every shard's targets (order: shard by shard).
  std::vector<IngestTargetStatus> TargetStatuses() const;

  size_t shard_count() const { return shards_.size(); }
  // The shard that owns `key` (stable for the process: a hash of the key's string).
  size_t ShardOf(const core::TargetKey& key) const;
  const KvEventIngestor& shard(size_t i) const { return *shards_[i]; }

  // The options of shard `i` of `shards`: the replay slot limits split between them.
  static IngestorOptions ShardOptions(const IngestorOptions& options, size_t i, size_t shards);

 private:
  std::vector<std::unique_ptr<KvEventIngestor>> shards_;
  mutable KvEventCounters sums_;
};

// The router's ZMQ source: one KvEventIngestor when shards <= 1 (snapshots included),
// else a ShardedKvEventSource (which refuses snapshot options).
std::unique_ptr<KvEventSource> MakeZmqEventSource(SharedKvIndex& index, IngestorOptions options,
                                                  size_t shards);

}  // namespace infera::events
