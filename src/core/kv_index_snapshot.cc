// KV-view snapshots (doc/snapshot.md §4.3, §5.1): KvIndex::ExportView writes one
// target's view as plain data, RestoreView rebuilds it; Reserve/ReserveTarget size the
// tables for a restore; the move operations swap a staging index in.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/kv_index.h"
#include "core/kv_index_impl.h"

namespace infera::core {

void TargetView::clear() {
  max_blocks = 0;
  evicted_blocks = 0;
  evicted_since_clear = false;
  epoch_stored = 0;
  blocks.clear();
  engine_hashes.clear();
}

KvIndex::KvIndex(KvIndex&& other) noexcept = default;

KvIndex& KvIndex::operator=(KvIndex&& other) noexcept {
  std::swap(impl_, other.impl_);
  return *this;
}

void KvIndex::Reserve(size_t rows) {
  ++impl_->generation;
  const size_t have = impl_->rows.size();
  if (rows > have) impl_->ReserveRows(rows - have);
}

void KvIndex::ReserveTarget(TargetId id, size_t entries) {
  ++impl_->generation;
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return;
  // (A sweep's order names map slots: it finishes before the map may move.)
  if (impl_->Pending(*t)) impl_->FinishPending(id, *t);
  const size_t have = t->engine_map.size();
  if (entries > have) t->engine_map.Reserve(entries - have, nullptr);
}

void KvIndex::ExportView(TargetId id, TargetView& out) const {
  out.clear();
  const Impl& x = *impl_;
  const Impl::Target* t = x.Live(id);
  if (t == nullptr) return;
  out.max_blocks = t->max_blocks;
  out.evicted_blocks = t->evicted;
  out.evicted_since_clear = t->evicted_since_clear;
  out.epoch_stored = t->max_blocks == 0 ? 0 : static_cast<uint32_t>(t->epoch_stored);
  // The engine map's entries by row (the map alone: no row read yet).
  struct Entry {
    uint32_t row, slot;
    bool operator<(const Entry& o) const { return row < o.row || (row == o.row && slot < o.slot); }
  };
  std::vector<Entry> entries;
  entries.reserve(t->engine_map.size());
  t->engine_map.ForEach([&](uint32_t e) { entries.push_back({t->engine_map.slot(e).row(), e}); });
  std::sort(entries.begin(), entries.end());
  // The held blocks, by row: each row read once (prefetched ahead: every row is a
  // miss in a table far larger than the cache). Entries whose row the target does not
  // hold (a pending purge's) are dropped. A target with unmapped blocks has held rows
  // no entry names: the whole table is scanned for them.
  struct Held {
    BlockHash hash;
    uint32_t parent_row;  // ParentOf(row)
    uint32_t entry_end;   // its entries: [previous entry_end, entry_end) of `kept`
    uint8_t tiers;
  };
  std::vector<Held> held;
  std::vector<uint32_t> held_rows;  // held[i]'s row, apart: searched for parents
  held.reserve(t->block_count);
  held_rows.reserve(t->block_count);
  std::vector<uint32_t> kept;  // map slots of the entries of held rows, by row
  kept.reserve(entries.size());
  auto hold = [&](uint32_t r) {
    const Row& row = x.rows.slot(r);
    const uint32_t tiers = HolderTiers(x.Get(row.holders, id));
    if (tiers == 0) return false;
    held.push_back({row.hash, ParentOf(row), 0, static_cast<uint8_t>(tiers)});
    held_rows.push_back(r);
    return true;
  };
  if (t->has_unmapped) {
    x.rows.ForEach([&](uint32_t r) { hold(r); });
    size_t k = 0;
    for (size_t i = 0; i < held.size(); ++i) {
      while (k < entries.size() && entries[k].row < held_rows[i]) ++k;
      for (; k < entries.size() && entries[k].row == held_rows[i]; ++k) {
        kept.push_back(entries[k].slot);
      }
      held[i].entry_end = static_cast<uint32_t>(kept.size());
    }
  } else {
    // (Far ahead: an iteration is a few instructions, a miss ~100 ns.)
    constexpr size_t kAhead = 64;
    for (size_t k = 0; k < entries.size(); ++k) {
      if (k + kAhead < entries.size()) __builtin_prefetch(&x.rows.slot(entries[k + kAhead].row));
      const uint32_t r = entries[k].row;
      const bool same = !held_rows.empty() && held_rows.back() == r;
      // (Only a pending purge leaves entries whose row may be erased since.)
      if (same || ((!t->purge_pending || x.HoldsRow(id, r)) && hold(r))) {
        kept.push_back(entries[k].slot);
        held.back().entry_end = static_cast<uint32_t>(kept.size());
      }
    }
  }
  const size_t n = held.size();
  // Each held block's parent among them (index into `held`), or kViewParentRoot /
  // kViewParentUnknown (its parent row is not held by the target, or not known).
  std::vector<uint32_t> parent_of(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t p = held[i].parent_row;
    uint32_t local = kViewParentUnknown;
    if (p == kRoot) {
      local = kViewParentRoot;
    } else if (IsRow(p) && n > 0) {
      // Branch-free lower bound (the rows are ~random: a branchy search mispredicts).
      const uint32_t* base = held_rows.data();
      for (size_t len = n; len > 1;) {
        const size_t half = len / 2;
        base = base[half - 1] < p ? base + half : base;
        len -= half;
      }
      if (*base == p) local = static_cast<uint32_t>(base - held_rows.data());
    }
    parent_of[i] = local;
  }
  // Parents first: from each block not yet emitted, up its chain to an emitted block
  // or the chain's start, then emitted top down. (A cycle, only possible with a hash
  // collision, is cut: the block met again gets an unknown parent.)
  constexpr uint32_t kNotYet = UINT32_MAX;
  std::vector<uint32_t> out_index(n, kNotYet);
  std::vector<uint8_t> on_path(n, 0);
  std::vector<uint32_t> path;
  out.blocks.reserve(n);
  out.engine_hashes.reserve(kept.size());
  for (size_t start = 0; start < n; ++start) {
    if (out_index[start] != kNotYet) continue;
    path.clear();
    uint32_t top_parent = kViewParentUnknown;
    for (uint32_t i = static_cast<uint32_t>(start);;) {
      path.push_back(i);
      on_path[i] = 1;
      const uint32_t p = parent_of[i];
      if (p == kViewParentRoot || p == kViewParentUnknown || on_path[p]) {
        top_parent = p == kViewParentRoot ? p : kViewParentUnknown;
        break;
      }
      if (out_index[p] != kNotYet) {
        top_parent = out_index[p];
        break;
      }
      i = p;
    }
    for (size_t k = path.size(); k-- > 0;) {
      const uint32_t b = path[k];
      on_path[b] = 0;
      ViewBlock v;
      v.router_hash = held[b].hash;
      v.parent = k + 1 == path.size() ? top_parent : out_index[path[k + 1]];
      v.tiers = held[b].tiers;
      v.engine_begin = static_cast<uint32_t>(out.engine_hashes.size());
      uint32_t youngest = kEpochs - 1;
      for (uint32_t e = b == 0 ? 0 : held[b - 1].entry_end; e < held[b].entry_end; ++e) {
        const EngineEntry& entry = t->engine_map.slot(kept[e]);
        if (v.engine_count == 255) break;  // (the format's limit: the rest are not kept)
        out.engine_hashes.push_back(entry.key());
        ++v.engine_count;
        youngest = std::min(youngest, Impl::Age(*t, entry.epoch()));
      }
      v.recency = t->max_blocks == 0 || v.engine_count == 0 ? 0 : kEpochs - 1 - youngest;
      out_index[b] = static_cast<uint32_t>(out.blocks.size());
      out.blocks.push_back(v);
    }
  }
}

RestoreStatus KvIndex::RestoreView(TargetId id, const TargetView& in) {
  Impl& x = *impl_;
  Impl::Target* t = x.Live(id);
  if (t == nullptr) return RestoreStatus::kUnknownTarget;
  // Structural checks first: nothing is applied to a view that fails them.
  for (size_t i = 0; i < in.blocks.size(); ++i) {
    const ViewBlock& b = in.blocks[i];
    if (b.parent != kViewParentRoot && b.parent != kViewParentUnknown && b.parent >= i) {
      return RestoreStatus::kCorrupt;
    }
    if (b.tiers == 0 || b.tiers > 7) return RestoreStatus::kCorrupt;
    if (size_t{b.engine_begin} + b.engine_count > in.engine_hashes.size()) {
      return RestoreStatus::kCorrupt;
    }
  }
  ++x.generation;
  // (An empty target keeps its reserved map: no clear, which would free it.)
  if (t->block_count != 0 || t->engine_map.size() != 0 || x.Pending(*t)) x.Clear(id, *t);
  t->max_blocks = in.max_blocks;
  t->evicted = in.evicted_blocks;
  t->evicted_since_clear = in.evicted_since_clear;
  t->epoch = 0;
  t->epoch_stored = in.max_blocks == 0 ? 0 : in.epoch_stored;
  x.ReserveRows(in.blocks.size());
  t->engine_map.Reserve(in.engine_hashes.size(), nullptr);
  std::vector<uint32_t> row_of(in.blocks.size());
  // Every block is a row-table miss (random slots of a table far larger than the
  // cache): looked up kPrefetchDistance blocks ahead so the misses overlap.
  const size_t n = in.blocks.size();
  for (size_t i = 0; i < n && i < kPrefetchDistance; ++i) x.rows.Prefetch(in.blocks[i].router_hash);
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      const ViewBlock& ahead = in.blocks[i + kPrefetchDistance];
      x.rows.Prefetch(ahead.router_hash);
      if (ahead.engine_count > 0 && ahead.engine_begin < in.engine_hashes.size()) {
        t->engine_map.Prefetch(in.engine_hashes[ahead.engine_begin]);
      }
    }
    const ViewBlock& b = in.blocks[i];
    const bool linked = b.parent != kViewParentUnknown;
    const uint32_t parent = b.parent == kViewParentRoot      ? kRoot
                            : b.parent == kViewParentUnknown ? kUnknownParent
                                                             : row_of[b.parent];
    bool fresh = false;
    uint32_t row = kNoRow;
    for (uint32_t tier = 0; tier < kTierCount; ++tier) {
      if (!(b.tiers & (1u << tier))) continue;
      bool first = false;
      row = x.AddTier(id, *t, b.router_hash, 1u << tier, linked, parent,
                      row == kNoRow ? &fresh : &first);
      if (!fresh) {
        x.Clear(id, *t);  // the hash came twice
        x.Refresh(id);
        return RestoreStatus::kCorrupt;
      }
    }
    row_of[i] = row;
    if (b.engine_count == 0) t->has_unmapped = true;
    // Age 31 − recency in epochs (recency 0..31; an unbounded view has one epoch).
    const uint32_t age = in.max_blocks == 0 ? 0 : kEpochs - 1 - std::min(b.recency, kEpochs - 1);
    const uint32_t epoch = (t->epoch + kEpochs - age) % kEpochs;
    for (uint32_t k = 0; k < b.engine_count; ++k) {
      auto [e, inserted] = t->engine_map.FindOrInsert(in.engine_hashes[b.engine_begin + k]);
      EngineEntry& entry = t->engine_map.slot(e);
      if (!inserted) {
        // An engine hash of an earlier block again (not from an export): it moves
        // here, the earlier block stays held without a mapping (as ApplyStored does).
        if (entry.row() != row) t->has_unmapped = true;
        --t->epoch_entries[entry.epoch()];
      } else if (k > 0) {
        t->aliased = true;
      }
      entry.set(row, epoch);
      ++t->epoch_entries[epoch];
    }
  }
  if (!t->closed) t->recheck_in = 4 * t->block_count + 64;
  x.MaybeEvict(id, *t);
  if (x.Pending(*t)) x.FinishPending(id, *t);
  x.Refresh(id);
  return RestoreStatus::kOk;
}

}  // namespace infera::core
