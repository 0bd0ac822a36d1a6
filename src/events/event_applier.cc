#include "events/event_applier.h"

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

ApplyStats ApplyEventBatch(core::KvIndex& index, core::TargetId id, const DecodedBatch& batch,
                           TargetApplyState& state) {
  ApplyStats stats;
  const size_t target_block_size = index.BlockSize(id);
  for (size_t i = 0; i < batch.events.size(); ++i) {
    const DecodedEvent& e = batch.events[i];
    if (e.type == EventType::kCleared) {
      index.ApplyCleared(id);
      ++stats.cleared;
      ++stats.events;
      stats.last_clear_index = static_cast<int64_t>(i);
      continue;
    }
    if (!AcceptGroup(e, state)) {
      ++stats.skipped_events;
      continue;
    }
    ++stats.events;
    if (e.type == EventType::kRemoved) {
      stats.blocks_removed += index.ApplyRemoved(id, batch.HashesOf(e), e.tier).removed;
      continue;
    }
    if (e.block_size != 0 && e.block_size != target_block_size) {
      stats.mismatched_block_size = e.block_size;
      ++stats.block_size_mismatches;
    }
    std::optional<core::BlockHash> parent;
    if (e.has_parent) parent = e.parent_hash;
    switch (index.ApplyStored(id, parent, batch.HashesOf(e), batch.TokensOf(e), e.tier)) {
      case core::StoreOutcome::kOk:
        stats.blocks_stored += e.hash_count;
        break;
      case core::StoreOutcome::kUnknownParent:
        ++stats.unknown_parents;
        --stats.events;
        break;
      case core::StoreOutcome::kCountMismatch:
        ++stats.count_mismatches;
        stats.blocks_stored += e.hash_count;
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
  return stats;
}

}  // namespace infera::events
