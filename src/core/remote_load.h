// RemoteLoad: the in-flight load other router replicas hold on each target
// (doc/replica-sync.md, "Receiver").
//
// Each replica publishes its own per-target contribution (active blocks, pending
// prefill blocks, decode demand tokens and requests) as messages: a delta (signed
// changes since its previous message) or a snapshot (absolute totals), numbered by
// `seq` per `epoch`. This table applies them:
//  * a replica's own messages (options.self_replica) are ignored;
//  * a newer epoch replaces the replica's state; an older one is stale (ignored);
//  * a snapshot replaces the replica's totals and marks it synced; a snapshot that
//    directly follows a snapshot (seq + 1) with the same ts_ms is the next part of a
//    split snapshot and adds its targets to the same totals;
//  * a delta with seq == last_seq + 1 on a synced replica adds; any other delta marks
//    the replica unsynced (a gap, counted) and is dropped, as are later deltas until
//    the next snapshot. Its totals keep counting meanwhile;
//  * Expire(now_ms) drops replicas not heard from for options.ttl_ms, with their load;
//  * malformed messages (bad version, empty or overlong ids, too many targets,
//    non-finite or out-of-range values, too many replicas) are rejected whole.
// Totals(key) sums live replicas and clamps each component at 0 (the sum of distinct
// block counts over replicas is an upper bound of their union: hashes are not sent).
//
// Targets are keyed by (worker_id, dp_rank), not TargetId: ids are per process. A key
// the local router does not know yet is kept and counts once the worker appears;
// RemoveWorker() drops a worker's keys (discovery removed it).
//
// Pure: no clock reads, no threads; time comes in as now_ms. Thread-safety: none.
//
// Example:
//   RemoteLoad remote({.self_replica = "me"});
//   remote.Apply(message, now_ms);
//   RemoteLoad::Load l = remote.Totals({"10.0.0.1:8000", 0});
//   remote.Expire(now_ms);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "core/types.h"

namespace infera::core {

enum class RemoteLoadKind : uint8_t { kDelta, kSnapshot };

// One target's load in a message (a delta's signed change or a snapshot's total).
struct RemoteTargetLoad {
  std::string worker_id;
  uint32_t dp_rank = 0;
  int64_t active_blocks = 0;
  double pending_prefill_blocks = 0;
  int64_t demand_tokens = 0;
  int64_t demand_requests = 0;
};

// A decoded replica load message (the wire's msgpack map, doc/replica-sync.md).
struct RemoteLoadMessage {
  uint64_t version = 1;
  std::string replica;
  uint64_t epoch = 0;
  uint64_t seq = 0;
  RemoteLoadKind kind = RemoteLoadKind::kDelta;
  uint64_t ts_ms = 0;
  std::vector<RemoteTargetLoad> targets;
};

struct RemoteLoadOptions {
  std::string self_replica;  // this replica's id: its own messages are ignored
  uint64_t ttl_ms = 3000;    // --router-replica-ttl-ms
  size_t max_replicas = 256;
  size_t max_targets_per_message = 4096;
  size_t max_id_bytes = 512;  // replica and worker ids
  // |value| bound of every integer component (a corrupt message must not overflow
  // the sums).
  int64_t max_abs_value = int64_t{1} << 40;
};

// What Apply() did with a message.
enum class RemoteApply : uint8_t {
  kApplied,   // totals changed (or confirmed) by it
  kSelf,      // our own message
  kStale,     // an older epoch, or a snapshot older than the replica's state
  kGap,       // a delta out of sequence: the replica is unsynced until a snapshot
  kUnsynced,  // a delta dropped while waiting for a snapshot
  kRejected,  // malformed
};
const char* RemoteApplyName(RemoteApply result);

class RemoteLoad {
 public:
  struct Load {
    int64_t active_blocks = 0;
    double pending_prefill_blocks = 0;
    int64_t demand_tokens = 0;
    int64_t demand_requests = 0;
    bool empty() const {
      return active_blocks == 0 && pending_prefill_blocks == 0 && demand_tokens == 0 &&
             demand_requests == 0;
    }
  };

  explicit RemoteLoad(RemoteLoadOptions options = {});

  RemoteApply Apply(const RemoteLoadMessage& message, uint64_t now_ms);
  // Drops replicas last heard from more than ttl_ms before now_ms; returns how many.
  size_t Expire(uint64_t now_ms);
  // The sum over live replicas, each component clamped at 0.
  Load Totals(const TargetKey& key) const;
  // Calls fn for every key with a non-empty (clamped) total.
  void ForEachTotal(absl::FunctionRef<void(const TargetKey&, const Load&)> fn) const;
  // Drops every replica's load on the worker's targets (the worker left discovery).
  void RemoveWorker(const std::string& worker_id);

  size_t replicas() const { return replicas_.size(); }
  size_t synced_replicas() const;
  uint64_t gaps() const { return gaps_; }
  uint64_t expired() const { return expired_; }
  uint64_t rejected() const { return rejected_; }
  const RemoteLoadOptions& options() const { return options_; }

 private:
  using Key = std::pair<std::string, uint32_t>;
  struct Replica {
    uint64_t epoch = 0;
    uint64_t last_seq = 0;
    uint64_t last_seen_ms = 0;
    bool synced = false;
    bool last_was_snapshot = false;
    uint64_t snapshot_ts_ms = 0;
    absl::flat_hash_map<Key, Load> targets;
  };

  bool Valid(const RemoteLoadMessage& message) const;
  static void Add(Load& into, const RemoteTargetLoad& change);
  static void Set(Load& into, const RemoteTargetLoad& total);

  RemoteLoadOptions options_;
  absl::flat_hash_map<std::string, Replica> replicas_;
  uint64_t gaps_ = 0;
  uint64_t expired_ = 0;
  uint64_t rejected_ = 0;
};

}  // namespace infera::core
