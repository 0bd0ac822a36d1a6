// KvIndex: the router's mirror of every target's cached KV blocks (doc/index.md).
//
// For every target (worker, dp rank) it knows which router block hashes the target
// holds and on which tiers, plus the per-target map engine hash -> router hash that
// KV events need (engines name blocks by their own hashes; the router matches on its
// own, recomputed from token ids).
//
// Thread-safety: none. One writer at a time; the edges decide the locking
// (doc/kv-events.md describes the ingestion design). Const calls may run
// concurrently with each other (FindMatches keeps its scratch per thread), never with
// a writer.
//
// Example:
//   KvIndex index;
//   TargetId w0 = index.AddTarget({"10.0.0.1:8000", 0}, /*block_size=*/16);
//   index.ApplyStored(w0, std::nullopt, engine_hashes, tokens, Tier::kDevice);
//   std::vector<MatchCounts> hits(candidates.size());
//   index.FindMatches(chain, candidates, hits);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/types.h"

namespace infera::core {

// Consecutive-prefix hits of one candidate for one request chain. The run starts at
// block 0 and ends at the first block the candidate holds on no tier; each block of
// the run is counted once, on the best tier the candidate holds it on.
struct MatchCounts {
  uint32_t device_hits = 0;
  uint32_t host_hits = 0;
  uint32_t disk_hits = 0;
  uint32_t total() const { return device_hits + host_hits + disk_hits; }
};

enum class StoreOutcome : uint8_t {
  kOk,
  // parent_engine_hash is not in the target's map: nothing was applied; the caller
  // counts it and treats it as a gap in the stream (never guesses a parent).
  kUnknownParent,
  // The number of engine hashes differs from the number of router blocks the tokens
  // make (block-size mismatch): router hashes were inserted but no engine mapping
  // was recorded, so later removals of these engine hashes are not applied.
  kCountMismatch,
  kUnknownTarget,
  // parent_engine_hash is not in the map, and the target's bound evicted blocks since
  // its last clear: the parent may be one of them (doc/index.md "Bounded views").
  // Nothing was applied (the blocks would be unreachable for matching); not a gap.
  kEvictedParent,
};

// The extra keys of one BlockStored (doc/kv-events.md §3 "Extra keys"), as the
// event applier attributed them: digests (core/hashing.h), 0 for none,
// kUnattributableKey when the event does not show them.
struct StoredKeys {
  uint64_t adapter = 0;  // the LoRA adapter of every block of the event
  uint64_t salt = 0;     // the cache_salt of the event's first block, when it has no parent
  // Blocks of the event from this index on are hashed with kUnattributableKey (the
  // event shows keys the router does not model for them: multimodal identifiers...).
  uint32_t unattributable_from = UINT32_MAX;
  friend bool operator==(const StoredKeys&, const StoredKeys&) = default;
};

struct RemoveResult {
  size_t removed = 0;  // (target, hash, tier) entries dropped
  size_t unknown = 0;  // engine hashes the target's map did not know
};

// Progress of one BlockStored applied in parts (ApplyStoredPart). Start each event
// with a fresh cursor.
struct StoreCursor {
  size_t next_block = 0;        // router blocks of the event applied so far
  size_t parts = 0;             // calls so far
  bool done = false;            // the event is applied (or was refused: see the outcome)
  BlockHash parent_router = 0;  // the router hash the next part chains from
};

// Row-table and engine-map growth built off the writer lock (KvIndex::PrepareGrowth).
class GrowthPlan {
 public:
  GrowthPlan();
  ~GrowthPlan();
  GrowthPlan(GrowthPlan&&) noexcept;
  GrowthPlan& operator=(GrowthPlan&&) noexcept;
  // Whether there is anything to install.
  bool empty() const { return impl_ == nullptr; }

 private:
  friend class KvIndex;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One target's view as plain data (doc/snapshot.md §4.3): what a snapshot stores of
// it, and what RestoreView rebuilds it from.
inline constexpr uint32_t kViewParentRoot = 0xFFFFFFFFu;     // the block starts a chain
inline constexpr uint32_t kViewParentUnknown = 0xFFFFFFFEu;  // held without a known parent
struct ViewBlock {
  BlockHash router_hash = 0;
  // Index of the parent in TargetView::blocks (< this block's own index), or
  // kViewParentRoot, or kViewParentUnknown (an orphan: its parent is not in the view).
  uint32_t parent = kViewParentRoot;
  // Rank in the bound's eviction order, 0 = oldest: 31 − the age in epochs of the
  // block's youngest engine hash (doc/index.md "Bounded views"); 0 when unbounded.
  uint32_t recency = 0;
  uint32_t engine_begin = 0;  // first of its engine hashes in TargetView::engine_hashes
  uint8_t engine_count = 0;   // 0..255 (0: held without an engine mapping)
  uint8_t tiers = 0;          // bit t = held on tier t (1..7)
  friend bool operator==(const ViewBlock&, const ViewBlock&) = default;
};
struct TargetView {
  size_t max_blocks = 0;  // the bound, 0 = unbounded
  uint64_t evicted_blocks = 0;
  bool evicted_since_clear = false;
  // Blocks stored in the bound's current epoch (where the epoch clock stands; 0 for
  // an unbounded view). Not in snapshot format 1: restored as 0 there, the restored
  // clock's next tick then comes up to max_blocks / 16 stores later.
  uint32_t epoch_stored = 0;
  std::vector<ViewBlock> blocks;  // parents before children
  std::vector<BlockHash> engine_hashes;
  void clear();
};
enum class RestoreStatus : uint8_t {
  kOk,
  // A parent index not below the block's own, an engine range out of bounds, a block
  // on no tier: nothing was applied. A router hash twice in the view (found while
  // applying): the target is left cleared.
  kCorrupt,
  kUnknownTarget,
};

class KvIndex {
 public:
  KvIndex();
  ~KvIndex();
  KvIndex(const KvIndex&) = delete;
  KvIndex& operator=(const KvIndex&) = delete;
  // Moves swap the implementations (a restored staging index replaces the router's,
  // doc/snapshot.md §6.1): the assigned-from index gets the old contents (freed with
  // it). A move-constructed-from index may only be destroyed or assigned to.
  KvIndex(KvIndex&& other) noexcept;
  KvIndex& operator=(KvIndex&& other) noexcept;

  // Adds a target (idempotent: an existing key returns its id; its block size is
  // updated). REQUIRES: block_size > 0.
  TargetId AddTarget(const TargetKey& key, size_t block_size);
  std::optional<TargetId> FindTarget(const TargetKey& key) const;
  // The key of a live target. REQUIRES: id is live.
  const TargetKey& Key(TargetId id) const;
  size_t BlockSize(TargetId id) const;
  // Removes the target and frees everything it owns; its id may be reused.
  void RemoveTarget(TargetId id);
  // Live target ids, ascending.
  std::vector<TargetId> Targets() const;

  // BlockStored: parent = 0 when `parent_engine_hash` is nullopt, else the router hash
  // the target's map gives. Chain-hashes `tokens` in the target's block size from the
  // parent with the event's extra keys (block i's key: BlockKey(adapter, salt) for
  // the first block of a parentless event, BlockKey(adapter, 0) for the others,
  // kUnattributableKey from keys.unattributable_from on), inserts each router hash on
  // `tier`, and maps engine_hashes[i] -> router_hash[i] when the counts agree.
  StoreOutcome ApplyStored(TargetId id, std::optional<BlockHash> parent_engine_hash,
                           std::span<const BlockHash> engine_hashes,
                           std::span<const TokenId> tokens, Tier tier, const StoredKeys& keys = {});
  // BlockRemoved: drops each engine hash's router hash from `tier`; the mapping goes
  // when the block is on no tier any more.
  RemoveResult ApplyRemoved(TargetId id, std::span<const BlockHash> engine_hashes, Tier tier);
  // AllBlocksCleared (and resync): empties the target's set and map.
  void ApplyCleared(TargetId id);

  // Bounded work per call (doc/index.md "Bounded work"): a writer that must not hold
  // its lock for a whole batch applies it in parts and releases the lock in between.
  // ApplyStored / ApplyRemoved above are ApplyStoredPart / ApplyRemovedPart with no
  // limit followed by DoPendingWork until none is left.
  //
  // ApplyStoredPart applies the next `max_blocks` (at least 1) router blocks of one
  // BlockStored from `cursor`; `cursor.done` once the event is applied or refused.
  // The first part returns what ApplyStored would (kOk, kUnknownParent, ...); a later
  // part whose parent (the previous part's last block) left the view meanwhile (the
  // bound evicted it) returns kEvictedParent and ends the event. When the view goes
  // past its bound, the eviction sweep is left pending. First finishes any pending
  // work of the target.
  StoreOutcome ApplyStoredPart(TargetId id, std::optional<BlockHash> parent_engine_hash,
                               std::span<const BlockHash> engine_hashes,
                               std::span<const TokenId> tokens, Tier tier,
                               const StoredKeys& keys, StoreCursor& cursor, size_t max_blocks);
  // ApplyRemoved for some of an event's hashes: the caller passes the event in pieces.
  // The purge of aliased engine hashes (below) is left pending; a pending purge is not
  // run first (the pieces of one BlockRemoved may follow each other), a pending sweep is.
  RemoveResult ApplyRemovedPart(TargetId id, std::span<const BlockHash> engine_hashes, Tier tier);
  // A table rebuild is O(table): growing the row table past 1M rows held the writer
  // ~0.1 s. PrepareGrowth (const: run it under a shared lock, readers go on) builds
  // the tables the next `more` inserts into target `id` would rebuild (the row table,
  // every engine map translated to its new rows, the target's own map grown; when
  // deleted slots alone used the row table's room up, the list of those that can turn
  // empty in place instead, OpenTable::ReclaimableDeleted); empty
  // when no rebuild is due or none can be prepared (then the insert rebuilds as
  // before). InstallGrowth (exclusive) swaps them in, O(targets), if nothing was
  // written since they were prepared, and says whether it did; the plan then holds
  // the old tables: destroy it after releasing the lock.
  GrowthPlan PrepareGrowth(TargetId id, size_t more) const;
  bool InstallGrowth(GrowthPlan& plan);
  // Whether the target has deferred work: the bound's eviction sweep, or the purge of
  // engine hashes whose block the target no longer holds.
  bool HasPendingWork(TargetId id) const;
  // Does about `budget` (at least 1) units of the target's deferred work; one unit is
  // one engine-map entry or row visited. Returns the units done (0: nothing pending).
  size_t DoPendingWork(TargetId id, size_t budget);

  // Inserts router hashes directly (tests, benchmarks, the offline simulator when it
  // shares hashes with the router). No engine mapping is recorded, so the next
  // ApplyCleared/RemoveTarget of this target scans the whole table (O(all rows))
  // instead of the target's map.
  void InsertRouterHashes(TargetId id, std::span<const BlockHash> router_hashes, Tier tier);
  // Inserts a chain of router hashes directly: router_hashes[0]'s parent is
  // `parent_router_hash` (0 = the chain starts at the root), router_hashes[i]'s is
  // router_hashes[i - 1] — what ApplyStored does after hashing, without engine
  // mapping (tests, benchmarks). Keeps the target prefix-closed when the parent is
  // held (doc/index.md "Prefix-closed views").
  void InsertRouterChain(TargetId id, BlockHash parent_router_hash,
                         std::span<const BlockHash> router_hashes, Tier tier);
  // Drops router hashes from `tier` directly (the counterpart of InsertRouterHashes);
  // returns how many (target, hash, tier) entries were dropped.
  size_t RemoveRouterHashes(TargetId id, std::span<const BlockHash> router_hashes, Tier tier);

  // For each candidates[i], the consecutive-prefix hits of `chain` into out[i].
  // One walk over the chain; stops when no candidate is still matching.
  // REQUIRES: out.size() == candidates.size(); candidates are live and distinct.
  void FindMatches(std::span<const BlockHash> chain, std::span<const TargetId> candidates,
                   std::span<MatchCounts> out) const;

  // The bound of the target's view (doc/index.md "Bounded views"): past max_blocks
  // distinct blocks, or max_blocks engine hashes in its map, the target's oldest
  // blocks (by when they were last stored) are evicted down to
  // max_blocks − max_blocks / 16, with the blocks that became unreachable and every
  // engine hash but one per kept block. 0 = unbounded (the default). Evicts at once
  // when the view is over.
  void SetMaxBlocks(TargetId id, size_t max_blocks);
  size_t MaxBlocks(TargetId id) const;
  // Blocks the bound evicted from the target's view since it was added.
  uint64_t EvictedBlocks(TargetId id) const;

  // Salted prefixes may be cached in the fleet: the router has routed a request with a
  // cache_salt (or runs --tenant-cache-salt). From then on a BlockStored that starts
  // a chain without showing its extra keys (no extra_keys on the wire) cannot be
  // attributed to a salt and is never matched (doc/kv-events.md §3 "Extra keys").
  // Sticky. Both may be called from any thread, under the index lock or not.
  void NoteSaltedTraffic() const;
  bool SaltedTraffic() const;

  // Distinct router hashes the target holds (on any tier): the admin cache view.
  size_t BlockCount(TargetId id) const;
  // Changes whenever the set of (router hash, tier) the target holds changes, and when
  // the target is added or cleared; never the same for two views (other targets,
  // a reused id, another index), never 0 for a live target (0: not live). Equal
  // versions: every Holds() answer for the target is the same (LoadState::Settle
  // skips a target whose view did not change, doc/selection.md "Cost of a pick").
  uint64_t ViewVersion(TargetId id) const;
  // Blocks the target holds on `tier` (a block on two tiers counts on each): the
  // fleet view's cached blocks by tier.
  size_t TierBlockCount(TargetId id, Tier tier) const;
  // (target, hash) entries across all targets.
  size_t EntryCount() const;
  // Distinct router hashes across all targets (rows of the global table).
  size_t DistinctHashCount() const;
  // Bytes of the index's tables (doc/index.md "Memory"): the row table's arrays, every
  // target's engine map, the holder-set pool. O(targets). What RSS over the base
  // holds beyond this is not the index's (doc/perf-scale.md "Session 15").
  size_t TableBytes() const;
  // Whether the index knows the target's view is prefix-closed (doc/index.md):
  // then FindMatches bisects the chain for it instead of walking it.
  bool IsPrefixClosed(TargetId id) const;
  // Engine hashes in the target's engine -> router map.
  size_t MappedEngineHashCount(TargetId id) const;
  // Whether the target holds `router_hash` on `tier`.
  bool Holds(TargetId id, BlockHash router_hash, Tier tier) const;
  // The target's router hashes, unordered (debug views and tests).
  std::vector<BlockHash> RouterHashes(TargetId id) const;

  // Snapshots (doc/snapshot.md §5.1). ExportView writes the target's view into `out`
  // (cleared first), parents before children: every held block with its tiers,
  // engine hashes, recency and parent, and the bound's state. O(view · log view).
  // REQUIRES: no writer of this target runs concurrently (a shared lock suffices).
  void ExportView(TargetId id, TargetView& out) const;
  // Replaces the target's view (cleared first) by `in`: rows, tiers, parent links,
  // engine map with each entry's epoch, the bound and its count, the prefix-closed
  // flag (recomputed: true when every block's parent is in the view). kCorrupt: see
  // RestoreStatus. A view over its bound is evicted at once.
  RestoreStatus RestoreView(TargetId id, const TargetView& in);
  // Sizes the row table so that `rows` distinct hashes in all fit without a rebuild
  // (a restore that follows moves no row); the index keeps that capacity until it
  // holds `rows` rows (a view refused and cleared meanwhile does not shrink it;
  // Reserve(0) gives it up). ReserveTarget sizes the target's engine map likewise for
  // `entries` engine hashes (kept until the target's next clear).
  void Reserve(size_t rows);
  void ReserveTarget(TargetId id, size_t entries);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace infera::core
