// Applying decoded KV-event batches to core::KvIndex (architecture §4, doc/kv-events.md).
//
// ApplyEventBatch applies every event of one decoded batch to one target, in order:
//   BlockStored      parent resolved through the target's engine->router map, tokens
//                    re-hashed by the router (core::KvIndex::ApplyStored)
//   BlockRemoved     engine hashes mapped to router hashes and removed from the tier
//   AllBlocksCleared the target's set and map emptied
// A BlockStored's extra keys (LoRA adapter, cache_salt, multimodal identifiers) are
// attributed by AttributeStoredKeys (doc/kv-events.md §3 "Extra keys"): what the
// event shows exactly is hashed as vLLM does; what it cannot show (a salt on a wire
// without extra_keys once salted traffic exists, an adapter known by id only, keys
// the router does not model) makes the blocks unattributable: never matched.
// Events that are not prefix KV are skipped: an unknown `medium`, a
// kv_cache_spec_kind other than full_attention / mla_attention / sink_full_attention,
// or a group_idx other than 0 that no BlockStored has shown to be a prefix-KV group.
// A group that a BlockStored names with a non-prefix kind is remembered too, so its
// removals (which carry only group_idx) never touch the prefix group's blocks.
//
// Thread-safety: none; the caller holds the index's writer lock (see KvEventIngestor).
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "core/kv_index.h"
#include "events/event_decoder.h"

namespace infera::events {

// What the applier remembers per target between batches.
struct TargetApplyState {
  // group_idx -> whether it holds prefix KV (learned from BlockStored kinds).
  absl::flat_hash_map<int64_t, bool> group_is_prefix;
};

struct ApplyStats {
  uint64_t events = 0;                 // events applied
  uint64_t skipped_events = 0;         // not prefix KV (medium, kind, group)
  uint64_t blocks_stored = 0;          // engine blocks of applied BlockStored events
  uint64_t blocks_removed = 0;         // (hash, tier) entries removed
  uint64_t cleared = 0;                // AllBlocksCleared events
  uint64_t unknown_parents = 0;        // BlockStored events whose parent the map did not know
  uint64_t evicted_parents = 0;        // ... when the view's bound may have evicted it (skipped)
  uint64_t count_mismatches = 0;       // BlockStored whose hash count != router block count
  uint64_t block_size_mismatches = 0;  // BlockStored with another block_size than the target's
  uint64_t unattributed_events = 0;    // BlockStored with blocks never matched (extra keys)
  // The last BlockStored block_size that differed from the target's (0: none).
  uint32_t mismatched_block_size = 0;
  // Index of the last AllBlocksCleared event in the batch, or -1.
  int64_t last_clear_index = -1;
};

// The extra keys of a BlockStored as the router hashes them. `salted_traffic`:
// KvIndex::SaltedTraffic(). REQUIRES: e.type == kStored.
core::StoredKeys AttributeStoredKeys(const DecodedEvent& e, bool salted_traffic);

// REQUIRES: `id` is a live target of `index`.
ApplyStats ApplyEventBatch(core::KvIndex& index, core::TargetId id, const DecodedBatch& batch,
                           TargetApplyState& state);

// Where a batch applied in slices stands (ApplyEventBatchSlice). Start each batch with
// a fresh cursor.
struct BatchCursor {
  size_t event = 0;         // the event being applied, or the next one
  bool in_event = false;    // events[event] is partly applied
  core::StoreCursor store;  // ... a BlockStored: its parts
  size_t removed = 0;       // ... a BlockRemoved: its hashes applied so far
  core::StoredKeys keys;    // ... a BlockStored: its hash keys (attributed once)
};

// Units of index work a router writer does per hold of the index lock: the blocks
// stored or removed and the entries or rows visited by the index's deferred work
// (doc/kv-events.md "Concurrency"). ~1 ms of work.
inline constexpr size_t kDefaultSliceUnits = 4096;

// Applies the batch from `cursor` on, doing about `budget` units of index work (at
// least one; blocks stored or removed, entries or rows the index's pending work
// visits: core::KvIndex "Bounded work"), and adds to `stats`. Returns true when the
// batch is done: every event applied and the target's pending work finished. The
// caller may release the index lock between two calls (readers then see the batch
// partly applied, exactly as if the engine had sent it in several batches).
// ApplyEventBatch is this with no limit. REQUIRES: between calls nothing else
// writes to the target (other targets may be written).
bool ApplyEventBatchSlice(core::KvIndex& index, core::TargetId id, const DecodedBatch& batch,
                          TargetApplyState& state, BatchCursor& cursor, size_t budget,
                          ApplyStats& stats);

}  // namespace infera::events
