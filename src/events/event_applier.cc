#include "events/event_applier.h"

#include <algorithm>

#include "core/hashing.h"

namespace infera::events {
namespace {

// Whether a usable event's group holds prefix KV, learning from BlockStored kinds.
bool AcceptGroup(const DecodedEvent& e, TargetApplyState& state) {
  if (e.type == EventType::kStored && e.has_spec_kind) {
    if (e.has_group_idx) state.group_is_prefix[e.group_idx] = e.usable;
    return e.usable;
  }
  if (!e.usable) return false;
  const int64_t group = e.has_group_idx ? e.group_idx : 0;
  auto it = state.group_is_prefix.find(group);
  if (it != state.group_is_prefix.end()) return it->second;
  return group == 0;
}

}  // namespace

core::StoredKeys AttributeStoredKeys(const DecodedEvent& e, bool salted_traffic) {
  constexpr uint64_t kUnknown = core::kUnattributableKey;
  constexpr uint32_t kNone = ExtraKeysSummary::kNone;
  core::StoredKeys k;
  if (e.lora_name_malformed) {
    k.adapter = kUnknown;
  } else if (e.has_lora_name) {
    k.adapter = e.lora_name_key;
  } else if (e.lora_id.has_value()) {
    k.adapter = kUnknown;  // an adapter known by id only: its name is what vLLM hashes
  }
  const bool root = !e.has_parent;
  const ExtraKeysSummary& x = e.extra_keys;
  if (!x.present) {
    // A wire without extra_keys (older vLLM, SGLang): a chain's first block may carry
    // any salt once salted requests exist.
    if (root && salted_traffic) k.salt = kUnknown;
    return k;
  }
  if (k.adapter == kUnknown) return k;
  if (x.malformed || x.entries != e.hash_count) {
    k.unattributable_from = 0;
    return k;
  }
  if (x.entries == 0) return k;
  // Entry 0: [lora_name]? [cache_salt]? (the salt only on a chain's first block).
  const uint32_t lora = k.adapter != 0 ? 1 : 0;
  bool first_ok = !x.first_other && x.first_strings >= lora && x.first_strings <= lora + 1 &&
                  (lora == 0 || x.first_key == k.adapter);
  if (first_ok && x.first_strings == lora + 1) {
    if (root) {
      k.salt = x.last_key;
    } else {
      first_ok = false;  // a salt on a block that is not a chain's first
    }
  }
  if (!first_ok) {
    k.unattributable_from = 0;
    return k;
  }
  // Entries 1..: exactly [lora_name], or nil without an adapter.
  uint32_t from = x.irregular;
  if (lora == 0) {
    from = std::min(from, x.single);
  } else {
    from = std::min(from, x.empty);
    from = std::min(from,
                    x.single != kNone && x.single_key != k.adapter ? x.single : x.single_mismatch);
  }
  k.unattributable_from = from;
  return k;
}

ApplyStats ApplyEventBatch(core::KvIndex& index, core::TargetId id, const DecodedBatch& batch,
                           TargetApplyState& state) {
  ApplyStats stats;
  BatchCursor cursor;
  while (!ApplyEventBatchSlice(index, id, batch, state, cursor, SIZE_MAX, stats)) {
  }
  return stats;
}

bool ApplyEventBatchSlice(core::KvIndex& index, core::TargetId id, const DecodedBatch& batch,
                          TargetApplyState& state, BatchCursor& cursor, size_t budget,
                          ApplyStats& stats) {
  budget = std::max<size_t>(budget, 1);
  size_t used = 0;
  const size_t target_block_size = index.BlockSize(id);
  for (;;) {
    const DecodedEvent* e =
        cursor.event < batch.events.size() ? &batch.events[cursor.event] : nullptr;
    // Deferred work first (the bound's sweep after a store, the purge after a
    // removal), except between the pieces of one BlockRemoved: a purge is only needed
    // before the target's next store.
    const bool mid_removal = cursor.in_event && e->type == EventType::kRemoved;
    if (!mid_removal && index.HasPendingWork(id)) {
      if (used >= budget) return false;
      used += index.DoPendingWork(id, budget - used);
      continue;
    }
    if (e == nullptr) return true;
    if (used >= budget) return false;
    if (!cursor.in_event) {
      if (e->type == EventType::kCleared) {
        used += index.BlockCount(id) + 1;  // (a clear visits the view, synchronously)
        index.ApplyCleared(id);
        ++stats.cleared;
        ++stats.events;
        stats.last_clear_index = static_cast<int64_t>(cursor.event);
        ++cursor.event;
        continue;
      }
      ++used;
      if (!AcceptGroup(*e, state)) {
        ++stats.skipped_events;
        ++cursor.event;
        continue;
      }
      ++stats.events;
      if (e->type == EventType::kStored && e->block_size != 0 &&
          e->block_size != target_block_size) {
        stats.mismatched_block_size = e->block_size;
        ++stats.block_size_mismatches;
      }
      cursor.in_event = true;
      cursor.store = core::StoreCursor{};
      cursor.removed = 0;
    }
    const size_t room = budget - used;
    if (e->type == EventType::kRemoved) {
      const std::span<const core::BlockHash> hashes = batch.HashesOf(*e);
      const size_t n = std::min(room, hashes.size() - cursor.removed);
      stats.blocks_removed +=
          index.ApplyRemovedPart(id, hashes.subspan(cursor.removed, n), e->tier).removed;
      cursor.removed += n;
      used += std::max<size_t>(n, 1);
      if (cursor.removed == hashes.size()) {
        cursor.in_event = false;
        ++cursor.event;
      }
      continue;
    }
    std::optional<core::BlockHash> parent;
    if (e->has_parent) parent = e->parent_hash;
    const bool first = cursor.store.parts == 0;
    if (first) {
      cursor.keys = AttributeStoredKeys(*e, index.SaltedTraffic());
      const core::StoredKeys& keys = cursor.keys;
      if (keys.adapter == core::kUnattributableKey || keys.salt == core::kUnattributableKey ||
          keys.unattributable_from < e->hash_count) {
        ++stats.unattributed_events;
      }
    }
    const size_t before = cursor.store.next_block;
    const core::StoreOutcome outcome =
        index.ApplyStoredPart(id, parent, batch.HashesOf(*e), batch.TokensOf(*e), e->tier,
                              cursor.keys, cursor.store, room);
    used += std::max<size_t>(cursor.store.next_block - before, 1);
    if (cursor.store.done) {
      cursor.in_event = false;
      ++cursor.event;
    }
    if (!first) {
      // The rest of the event hung below a block the bound evicted meanwhile.
      if (outcome == core::StoreOutcome::kEvictedParent) ++stats.evicted_parents;
      continue;
    }
    switch (outcome) {
      case core::StoreOutcome::kOk:
        stats.blocks_stored += e->hash_count;
        break;
      case core::StoreOutcome::kUnknownParent:
        ++stats.unknown_parents;
        --stats.events;
        break;
      case core::StoreOutcome::kCountMismatch:
        ++stats.count_mismatches;
        stats.blocks_stored += e->hash_count;
        break;
      case core::StoreOutcome::kEvictedParent:
        // The parent may be a block the view's bound evicted: skipped, not a gap.
        ++stats.evicted_parents;
        --stats.events;
        break;
      case core::StoreOutcome::kUnknownTarget:
        --stats.events;
        break;
    }
  }
}

}  // namespace infera::events
