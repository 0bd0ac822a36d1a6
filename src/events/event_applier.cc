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
    const core::StoredKeys keys = AttributeStoredKeys(e, index.SaltedTraffic());
    if (keys.adapter == core::kUnattributableKey || keys.salt == core::kUnattributableKey ||
        keys.unattributable_from < e.hash_count) {
      ++stats.unattributed_events;
    }
    switch (index.ApplyStored(id, parent, batch.HashesOf(e), batch.TokensOf(e), e.tier, keys)) {
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
