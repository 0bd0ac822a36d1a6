// KV-view snapshots (doc/snapshot.md §4.3, §5.1): KvIndex::ExportView writes one
// target's view as plain data, RestoreView rebuilds it; Reserve/ReserveTarget size the
// tables for a restore; the move operations swap a staging index in.
#include <algorithm>
#include <bit>
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
  impl_->rows_floor = rows > have ? rows : 0;
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

namespace {

// Row index -> block index for one export: open addressing over a power of two of at
// least twice the rows, one 64-bit cell each (0 = empty).
class LocalRows {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  explicit LocalRows(size_t rows) : cells_(std::bit_ceil(2 * rows + 16), 0) {
    mask_ = cells_.size() - 1;
  }
  void Insert(uint32_t row, uint32_t value) {
    size_t i = Home(row);
    while (cells_[i] != 0) i = (i + 1) & mask_;
    cells_[i] = (uint64_t{row} + 1) << 32 | value;
  }
  uint32_t Find(uint32_t row) const {
    const uint64_t key = uint64_t{row} + 1;
    for (size_t i = Home(row);; i = (i + 1) & mask_) {
      if (cells_[i] == 0) return kNone;
      if (cells_[i] >> 32 == key) return static_cast<uint32_t>(cells_[i]);
    }
  }

 private:
  size_t Home(uint32_t row) const { return (uint64_t{row} * 0x9E3779B97F4A7C15ull >> 32) & mask_; }
  std::vector<uint64_t> cells_;
  size_t mask_ = 0;
};

}  // namespace

void KvIndex::ExportView(TargetId id, TargetView& out) const {
  out.clear();
  const Impl& x = *impl_;
  const Impl::Target* t = x.Live(id);
  if (t == nullptr) return;
  out.max_blocks = t->max_blocks;
  out.evicted_blocks = t->evicted;
  out.evicted_since_clear = t->evicted_since_clear;
  out.epoch_stored = t->max_blocks == 0 ? 0 : static_cast<uint32_t>(t->epoch_stored);
  // The held blocks in the engine map's order, each row read once (prefetched far
  // ahead: every row is a miss in a table far larger than the cache; an iteration is a
  // few instructions), found again through a small local table row -> block. Entries
  // whose row the target does not hold (a pending purge's) are dropped. A target with
  // unmapped blocks has held rows no entry names: the row table is scanned for them.
  struct Held {
    BlockHash hash;
    uint32_t parent_row;  // ParentOf(row)
    uint8_t tiers;
  };
  std::vector<Held> held;
  held.reserve(t->block_count);
  LocalRows local(std::max(t->block_count, t->engine_map.size()));  // (held <= either)
  auto hold = [&](uint32_t r) {
    const Row& row = x.rows.slot(r);
    const uint32_t tiers = HolderTiers(x.Get(row.holders, id));
    if (tiers == 0) return LocalRows::kNone;
    held.push_back({row.hash, ParentOf(row), static_cast<uint8_t>(tiers)});
    const uint32_t i = static_cast<uint32_t>(held.size() - 1);
    local.Insert(r, i);
    return i;
  };
  if (t->has_unmapped) x.rows.ForEach([&](uint32_t r) { hold(r); });
  const EngineMap& map = t->engine_map;
  std::vector<std::pair<uint32_t, uint32_t>> mapped;  // (map slot, block)
  mapped.reserve(map.size());
  constexpr uint32_t kAhead = 64;
  for (uint32_t e = 0; e < map.capacity(); ++e) {
    if (e + kAhead < map.capacity() && map.full(e + kAhead)) {
      __builtin_prefetch(&x.rows.slot(map.slot(e + kAhead).row()));
    }
    if (!map.full(e)) continue;
    const uint32_t r = map.slot(e).row();
    uint32_t i = local.Find(r);
    // (Only a pending purge leaves entries whose row may be erased since.)
    if (i == LocalRows::kNone && !t->has_unmapped && (!t->purge_pending || x.HoldsRow(id, r))) {
      i = hold(r);
    }
    if (i != LocalRows::kNone) mapped.emplace_back(e, i);
  }
  const size_t n = held.size();
  // Block i's entries: kept[first[i] .. first[i + 1]) (a counting sort by block).
  std::vector<uint32_t> first(n + 1, 0);
  for (const auto& [e, i] : mapped) ++first[i + 1];
  for (size_t i = 0; i < n; ++i) first[i + 1] += first[i];
  std::vector<uint32_t> kept(mapped.size());
  {
    std::vector<uint32_t> fill(first.begin(), first.end() - 1);
    for (const auto& [e, i] : mapped) kept[fill[i]++] = e;
  }
  // Each held block's parent among them, or kViewParentRoot / kViewParentUnknown (its
  // parent row is not held by the target, or not known).
  std::vector<uint32_t> parent_of(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t p = held[i].parent_row;
    const uint32_t at = IsRow(p) ? local.Find(p) : LocalRows::kNone;
    parent_of[i] = p == kRoot ? kViewParentRoot : at == LocalRows::kNone ? kViewParentUnknown : at;
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
      for (uint32_t e = first[b]; e < first[b + 1]; ++e) {
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
  // (An empty target keeps its reserved map: no clear, which would free it; the flags
  // a clear resets are reset here, as an emptied view may have kept them.)
  if (t->block_count != 0 || t->engine_map.size() != 0 || x.Pending(*t)) {
    x.Clear(id, *t);
  } else {
    t->closed = true;
    t->has_unmapped = false;
    t->aliased = false;
  }
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
