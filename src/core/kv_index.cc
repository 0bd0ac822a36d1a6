#include "core/kv_index.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "core/hashing.h"
#include "core/kv_index_impl.h"

namespace infera::core {
GrowthPlan::GrowthPlan() = default;
GrowthPlan::~GrowthPlan() = default;
GrowthPlan::GrowthPlan(GrowthPlan&&) noexcept = default;
GrowthPlan& GrowthPlan::operator=(GrowthPlan&&) noexcept = default;

GrowthPlan KvIndex::PrepareGrowth(TargetId id, size_t more) const {
  GrowthPlan plan;
  const Impl& x = *impl_;
  const Impl::Target* t = x.Live(id);
  if (t == nullptr) return plan;
  bool rows_due = x.rows.NeedsRebuild(more);
  // (A target with pending work finishes it before it inserts: its map is not grown
  // now, and a sweep's order names its slots.)
  const bool map_due = !x.Pending(*t) && t->engine_map.NeedsRebuild(more);
  if (!rows_due && !map_due) return plan;
  auto p = std::make_unique<GrowthPlan::Impl>();
  p->generation = x.generation;
  if (rows_due && x.rows.DeletedUsedTheRoom(more)) {
    // Deleted slots used the room up (churn): turn those no probe needs empty, in
    // place, instead of a rebuild at the same capacity (0.55-0.7 s of CPU at 8.4M rows
    // plus every engine map translated, doc/perf-events.md "Session 13").
    std::vector<uint32_t> reclaim = x.rows.ReclaimableDeleted();
    if (x.rows.ReclaimWorthIt(reclaim.size(), more)) {
      p->reclaim = std::move(reclaim);
      rows_due = false;
    }
  }
  if (!rows_due) {
    // Only this target's map grows: O(its map), not O(targets) (at 4,096 targets the
    // scan of every target per map growth was the ingestion thread's largest cost,
    // doc/perf-scale.md).
    if (map_due) {
      p->maps.emplace_back(id,
                           t->engine_map.Rebuilt(t->engine_map.ReserveCapacity(more), nullptr));
    }
    plan.impl_ = std::move(p);
    return plan;
  }
  for (const Impl::Target& u : x.targets) {
    // Entries of a pending purge may name erased rows: not translatable here.
    if (u.live && u.purge_pending) return plan;
  }
  std::vector<uint32_t> old_to_new;
  if (rows_due) {
    p->rows_rebuilt = true;
    p->rows = x.rows.Rebuilt(x.rows.ReserveCapacity(more), &old_to_new);
    TranslateParents(p->rows, old_to_new);
  }
  for (TargetId u = 0; u < x.targets.size(); ++u) {
    const Impl::Target& target = x.targets[u];
    if (!target.live) continue;
    const bool grow = u == id && map_due;
    if (!grow && (!rows_due || target.engine_map.size() == 0)) continue;
    // Same slots unless grown (a sweep's order names them).
    EngineMap map =
        grow ? target.engine_map.Rebuilt(target.engine_map.ReserveCapacity(more), nullptr)
             : target.engine_map.Clone();
    bool ok = true;
    if (rows_due) {
      ForEachEntryTranslated(map, old_to_new, [&](uint32_t i, uint32_t to) {
        if (to == kNoRow) ok = false;
        EngineEntry& e = map.slot(i);
        e.set(to, e.epoch());
      });
    }
    if (!ok) return plan;
    p->maps.emplace_back(u, std::move(map));
  }
  plan.impl_ = std::move(p);
  return plan;
}

bool KvIndex::InstallGrowth(GrowthPlan& plan) {
  if (plan.impl_ == nullptr) return false;
  std::unique_ptr<GrowthPlan::Impl> p = std::move(plan.impl_);
  if (p->generation != impl_->generation) return false;  // written since: stale
  ++impl_->generation;
  if (!p->reclaim.empty()) impl_->rows.ReclaimSlots(p->reclaim);
  if (p->rows_rebuilt) std::swap(impl_->rows, p->rows);
  for (auto& [u, map] : p->maps) std::swap(impl_->targets[u].engine_map, map);
  plan.impl_ = std::move(p);  // the old tables: freed with the plan, off the lock
  return true;
}

KvIndex::KvIndex() : impl_(std::make_unique<Impl>()) {}
KvIndex::~KvIndex() = default;

TargetId KvIndex::AddTarget(const TargetKey& key, size_t block_size) {
  ++impl_->generation;
  assert(block_size > 0);
  auto [it, inserted] = impl_->by_key.try_emplace({key.worker_id, key.dp_rank}, 0);
  if (!inserted) {
    impl_->targets[it->second].block_size = block_size;
    return it->second;
  }
  TargetId id;
  if (!impl_->free_ids.empty()) {
    id = impl_->free_ids.back();
    impl_->free_ids.pop_back();
  } else {
    id = static_cast<TargetId>(impl_->targets.size());
    // 65535 live targets (the holder word's 16-bit field): far past any fleet.
    if (id >= kMaxTargets) std::abort();
    impl_->targets.emplace_back();
  }
  Impl::Target& t = impl_->targets[id];
  t.key = key;
  t.block_size = block_size;
  t.live = true;
  t.block_count = 0;
  impl_->Stamp(t);
  t.closed = true;
  t.has_unmapped = false;
  t.aliased = false;
  for (size_t& n : t.tier_entries) n = 0;
  t.max_blocks = 0;
  t.epoch = 0;
  t.epoch_stored = 0;
  for (uint32_t& n : t.epoch_entries) n = 0;
  t.evicted = 0;
  t.evicted_since_clear = false;
  t.purge_pending = false;
  t.purge_cursor = 0;
  t.sweep.reset();
  if (impl_->walk_mode.size() <= id) impl_->walk_mode.resize(id + 1);
  impl_->Refresh(id);
  it->second = id;
  return id;
}

std::optional<TargetId> KvIndex::FindTarget(const TargetKey& key) const {
  auto it = impl_->by_key.find(std::make_pair(key.worker_id, key.dp_rank));
  if (it == impl_->by_key.end()) return std::nullopt;
  return it->second;
}

const TargetKey& KvIndex::Key(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  if (t == nullptr) std::abort();  // REQUIRES violated
  return t->key;
}

size_t KvIndex::BlockSize(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t ? t->block_size : 0;
}

void KvIndex::RemoveTarget(TargetId id) {
  ++impl_->generation;
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return;
  impl_->Clear(id, *t);
  impl_->by_key.erase(std::make_pair(t->key.worker_id, t->key.dp_rank));
  t->live = false;
  t->key = TargetKey{};
  impl_->free_ids.push_back(id);
  ++impl_->mode_generation;
}

std::vector<TargetId> KvIndex::Targets() const {
  std::vector<TargetId> out;
  for (TargetId id = 0; id < impl_->targets.size(); ++id) {
    if (impl_->targets[id].live) out.push_back(id);
  }
  return out;
}

StoreOutcome KvIndex::ApplyStored(TargetId id, std::optional<BlockHash> parent_engine_hash,
                                  std::span<const BlockHash> engine_hashes,
                                  std::span<const TokenId> tokens, Tier tier,
                                  const StoredKeys& keys) {
  StoreCursor cursor;
  const StoreOutcome outcome = ApplyStoredPart(id, parent_engine_hash, engine_hashes, tokens, tier,
                                               keys, cursor, SIZE_MAX);
  if (Impl::Target* t = impl_->Live(id)) impl_->FinishPending(id, *t);
  return outcome;
}

StoreOutcome KvIndex::ApplyStoredPart(TargetId id, std::optional<BlockHash> parent_engine_hash,
                                      std::span<const BlockHash> engine_hashes,
                                      std::span<const TokenId> tokens, Tier tier,
                                      const StoredKeys& keys, StoreCursor& cursor,
                                      size_t max_blocks) {
  ++impl_->generation;
  Impl::Target* t = impl_->Live(id);
  ++cursor.parts;
  if (t == nullptr) {
    cursor.done = true;
    return StoreOutcome::kUnknownTarget;
  }
  impl_->FinishPending(id, *t);
  const size_t block_size = t->block_size;
  const size_t total = tokens.size() / block_size;
  const bool mapped = engine_hashes.size() == total;
  BlockHash parent = 0;
  if (cursor.next_block == 0) {
    if (parent_engine_hash.has_value()) {
      const uint32_t e = t->engine_map.Find(*parent_engine_hash);
      if (e == EngineMap::kNone) {
        cursor.done = true;
        return t->evicted_since_clear ? StoreOutcome::kEvictedParent : StoreOutcome::kUnknownParent;
      }
      parent = impl_->rows.slot(t->engine_map.slot(e).row()).hash;
    }
  } else {
    // The previous part's last block: the bound may have evicted it since.
    parent = cursor.parent_router;
    const uint32_t r = impl_->rows.Find(parent);
    if (r == kNoRow || !impl_->HoldsRow(id, r)) {
      cursor.done = true;
      return StoreOutcome::kEvictedParent;
    }
  }
  const size_t n = std::min(std::max<size_t>(max_blocks, 1), total - cursor.next_block);
  std::vector<BlockHash>& router = Scratch().hashes;
  router.clear();
  // Block i of the event (counted from the event's first block, across parts) is keyed
  // by the adapter, the first block of a chain's root also by the salt; blocks from
  // unattributable_from on by kUnattributableKey.
  const size_t first = cursor.next_block;
  const std::span<const TokenId> part = tokens.subspan(first * block_size, n * block_size);
  if (keys.unattributable_from == UINT32_MAX) {
    const uint64_t salt = first == 0 && !parent_engine_hash.has_value() ? keys.salt : 0;
    AppendChain(part, block_size, parent, HashKeys{salt, keys.adapter}, router);
  } else {
    BlockHash h = parent;
    for (size_t j = 0; j < n; ++j) {
      const size_t i = first + j;
      uint64_t key = BlockKey(keys.adapter, i == 0 && !parent_engine_hash ? keys.salt : 0);
      if (i >= keys.unattributable_from) key = kUnattributableKey;
      h = HashChunk(h, part.subspan(j * block_size, block_size), key);
      router.push_back(h);
    }
  }
  const std::span<const BlockHash> engine_part =
      mapped ? engine_hashes.subspan(first, n) : std::span<const BlockHash>();
  const bool was_closed = t->closed;
  impl_->InsertChain(id, *t, parent, router, TierBit(tier), mapped ? &engine_part : nullptr);
  cursor.next_block += n;
  if (n > 0) cursor.parent_router = router.back();
  cursor.done = cursor.next_block == total;
  impl_->MaybeEvict(id, *t);
  impl_->AfterEvent(id, *t, was_closed, router.size());
  return mapped ? StoreOutcome::kOk : StoreOutcome::kCountMismatch;
}

RemoveResult KvIndex::ApplyRemoved(TargetId id, std::span<const BlockHash> engine_hashes,
                                   Tier tier) {
  const RemoveResult result = ApplyRemovedPart(id, engine_hashes, tier);
  if (Impl::Target* t = impl_->Live(id)) impl_->FinishPending(id, *t);
  return result;
}

RemoveResult KvIndex::ApplyRemovedPart(TargetId id, std::span<const BlockHash> engine_hashes,
                                       Tier tier) {
  ++impl_->generation;
  RemoveResult result;
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) {
    result.unknown = engine_hashes.size();
    return result;
  }
  if (t->sweep != nullptr) impl_->FinishPending(id, *t);
  const uint32_t bit = TierBit(tier);
  EngineMap& map = t->engine_map;
  RowTable& rows = impl_->rows;
  const bool was_closed = t->closed;
  bool erased = false;
  // In chunks, passes so the dependent cache misses of each block (engine map, its
  // row, the parent's row) overlap across the chunk: prefetch the map slots; find
  // them and prefetch the rows; read those and prefetch the parents' rows; apply.
  constexpr size_t kChunk = 32;
  uint32_t entry_of[kChunk];
  for (size_t start = 0; start < engine_hashes.size(); start += kChunk) {
    const auto chunk = engine_hashes.subspan(start, std::min(kChunk, engine_hashes.size() - start));
    for (BlockHash engine : chunk) map.Prefetch(engine);
    for (size_t i = 0; i < chunk.size(); ++i) {
      entry_of[i] = map.Find(chunk[i]);
      if (entry_of[i] != EngineMap::kNone)
        __builtin_prefetch(&rows.slot(map.slot(entry_of[i]).row()));
    }
    if (t->closed) {
      for (size_t i = 0; i < chunk.size(); ++i) {
        if (entry_of[i] == EngineMap::kNone) continue;
        const uint32_t parent = ParentOf(rows.slot(map.slot(entry_of[i]).row()));
        if (IsRow(parent)) __builtin_prefetch(&rows.slot(parent));
      }
    }
    for (size_t i = 0; i < chunk.size(); ++i) {
      const uint32_t e = entry_of[i];
      // (An engine hash twice in one event: its entry went with the first.)
      if (e == EngineMap::kNone || !map.full(e) || map.slot(e).key() != chunk[i]) {
        ++result.unknown;
        continue;
      }
      // (An alias of a block removed before in this event, a purge pending: the
      // target does not hold its row; it goes as the purge would erase it.)
      auto [dropped, left] = impl_->DropTiers(id, *t, map.slot(e).row(), bit);
      if (dropped) ++result.removed;
      if (left == 0) {
        impl_->EraseEntry(*t, e);
        erased = true;
      }
    }
  }
  // Other engine hashes of a block that went may still name its row: erased by a
  // purge (O(map)) before the target's next store; until then the target does not
  // hold those rows, so a removal through them drops nothing.
  if (t->aliased && erased) {
    t->purge_pending = true;
    t->purge_cursor = 0;
  }
  impl_->AfterEvent(id, *t, was_closed, engine_hashes.size());
  if (!t->purge_pending) impl_->MaybeShrink();
  return result;
}

void KvIndex::NoteSaltedTraffic() const {
  impl_->salted_traffic.store(true, std::memory_order_release);
}

bool KvIndex::SaltedTraffic() const {
  return impl_->salted_traffic.load(std::memory_order_acquire);
}

bool KvIndex::HasPendingWork(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t != nullptr && impl_->Pending(*t);
}

size_t KvIndex::DoPendingWork(TargetId id, size_t budget) {
  ++impl_->generation;
  Impl::Target* t = impl_->Live(id);
  return t == nullptr ? 0 : impl_->DoPending(id, *t, std::max<size_t>(budget, 1));
}

void KvIndex::ApplyCleared(TargetId id) {
  ++impl_->generation;
  Impl::Target* t = impl_->Live(id);
  if (t != nullptr) impl_->Clear(id, *t);
}

void KvIndex::InsertRouterHashes(TargetId id, std::span<const BlockHash> router_hashes, Tier tier) {
  ++impl_->generation;
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return;
  impl_->ReserveRows(router_hashes.size());
  for (size_t i = 0; i < router_hashes.size() && i < kPrefetchDistance; ++i) {
    impl_->rows.Prefetch(router_hashes[i]);
  }
  const uint32_t bit = TierBit(tier);
  for (size_t i = 0; i < router_hashes.size(); ++i) {
    if (i + kPrefetchDistance < router_hashes.size()) {
      impl_->rows.Prefetch(router_hashes[i + kPrefetchDistance]);
    }
    bool fresh = false;
    impl_->AddTier(id, *t, router_hashes[i], bit, /*linked=*/false, kUnknownParent, &fresh);
    if (fresh) t->has_unmapped = true;
  }
  impl_->Refresh(id);
}

void KvIndex::InsertRouterChain(TargetId id, BlockHash parent_router_hash,
                                std::span<const BlockHash> router_hashes, Tier tier) {
  ++impl_->generation;
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return;
  impl_->InsertChain(id, *t, parent_router_hash, router_hashes, TierBit(tier), nullptr);
  impl_->Refresh(id);
}

size_t KvIndex::RemoveRouterHashes(TargetId id, std::span<const BlockHash> router_hashes,
                                   Tier tier) {
  ++impl_->generation;
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return 0;
  size_t removed = 0;
  for (BlockHash h : router_hashes) {
    const uint32_t i = impl_->rows.Find(h);
    if (i != kNoRow && impl_->DropTiers(id, *t, i, TierBit(tier)).first) ++removed;
  }
  impl_->PurgeEngineMap(id, *t);
  impl_->Refresh(id);
  impl_->MaybeShrink();
  return removed;
}

// The exact walk (doc/index.md "The linear walk"): one lookup per block of the
// longest candidate run. REQUIRES: out is zeroed, candidates non-empty.
void KvIndex::Impl::LinearWalk(std::span<const BlockHash> chain,
                               std::span<const TargetId> candidates,
                               std::span<MatchCounts> out) const {
  const size_t n = candidates.size();

  WalkScratch& s = Scratch();
  s.run.assign(n, 0);

  const size_t blocks = chain.size();
  for (size_t i = 0; i < blocks && i < kPrefetchDistance; ++i) rows.Prefetch(chain[i]);

  // Counts a still-matching candidate's hit on block b at its best tier (device
  // hits are derived at the end: run − host − disk).
  auto count_lower_tier = [&](uint32_t pos, uint32_t tiers) {
    if (tiers & 1u) return;
    if (tiers & 2u) {
      ++out[pos].host_hits;
    } else {
      ++out[pos].disk_hits;
    }
  };

  // The holders of block i, looked up kLookAhead blocks before the walk needs them
  // (their rows were prefetched kPrefetchDistance ahead), so the holder set of a
  // row that has one is prefetched then and its miss overlaps the blocks between
  // (a row with two or more holders costs a dependent miss otherwise). Block 0 is
  // looked up alone: a walk that ends there pays for no look-ahead.
  uint32_t ahead[kLookRing];
  size_t looked = 0;  // blocks [0, looked) are in `ahead`
  auto holders_at = [&](size_t i) -> uint32_t {
    const size_t want = i == 0 ? 1 : std::min(blocks, i + kLookAhead + 1);
    for (; looked < want; ++looked) {
      if (looked + kPrefetchDistance < blocks) rows.Prefetch(chain[looked + kPrefetchDistance]);
      const uint32_t r = rows.Find(chain[looked]);
      const uint32_t v = r == kNoRow ? 0 : rows.slot(r).holders;
      if (IsSet(v)) __builtin_prefetch(&SetOf(v));
      ahead[looked % kLookRing] = v;
    }
    return ahead[i % kLookRing];
  };

  size_t b = 0;
  bool wide = n > kSmallList;
  s.small.clear();
  uint32_t words = 0;
  size_t remaining = n;
  if (wide) {
    TargetId max_t = 0;
    for (TargetId t : candidates) max_t = std::max(max_t, t);
    words = max_t / 64 + 1;
    s.still.assign(words, 0);
    s.planes.assign(3 * static_cast<size_t>(words), 0);
    if (s.pos_of.size() <= max_t) s.pos_of.resize(max_t + 1);
    for (uint32_t pos = 0; pos < n; ++pos) {
      const TargetId t = candidates[pos];
      s.still[t >> 6] |= uint64_t{1} << (t & 63);
      s.pos_of[t] = pos;
    }
  } else {
    for (uint32_t pos = 0; pos < n; ++pos) s.small.push_back(pos);
  }

  // Wide mode: bitset intersection, one word at a time.
  for (; wide && b < blocks; ++b) {
    const uint32_t v = holders_at(b);
    if (v == 0) break;  // no row, or a kept parent row: nobody holds the block
    const HolderSet* set = IsSet(v) ? &SetOf(v) : nullptr;
    if (set != nullptr) {
      // Planes of the row's holders: the set's own when dense; a sparse set's
      // holders are scattered into scratch planes (and cleared again below).
      const uint64_t *dev, *host, *disk;
      uint32_t row_words;
      if (set->dense) {
        dev = set->plane(0);
        host = set->plane(1);
        disk = set->plane(2);
        row_words = set->words;
      } else {
        for (uint32_t h : set->sparse) {
          const TargetId t = HolderTarget(h);
          if ((t >> 6) >= words) continue;
          const uint32_t tiers = HolderTiers(h);
          for (uint32_t p = 0; p < 3; ++p) {
            if (tiers & (1u << p)) s.planes[p * words + (t >> 6)] |= uint64_t{1} << (t & 63);
          }
        }
        dev = s.planes.data();
        host = dev + words;
        disk = host + words;
        row_words = words;
      }
      for (uint32_t w = 0; w < words; ++w) {
        const uint64_t still = s.still[w];
        if (!still) continue;
        uint64_t d = 0, h = 0, k = 0;
        if (w < row_words) {
          d = dev[w];
          h = host[w];
          k = disk[w];
        }
        uint64_t dropped = still & ~(d | h | k);
        const uint64_t kept = still & ~dropped;
        remaining -= std::popcount(dropped);
        while (dropped) {
          s.run[s.pos_of[w * 64 + std::countr_zero(dropped)]] = static_cast<uint32_t>(b);
          dropped &= dropped - 1;
        }
        s.still[w] = kept;
        uint64_t lower = kept & ~d;
        while (lower) {
          const uint32_t bit = std::countr_zero(lower);
          count_lower_tier(s.pos_of[w * 64 + bit], (h >> bit) & 1 ? 2u : 4u);
          lower &= lower - 1;
        }
      }
      if (!set->dense) {
        for (uint32_t h : set->sparse) {
          const TargetId t = HolderTarget(h);
          if ((t >> 6) >= words) continue;
          for (uint32_t p = 0; p < 3; ++p) s.planes[p * words + (t >> 6)] = 0;
        }
      }
      if (remaining == 0) break;
      if (remaining <= kSmallList) {
        // Switch to the list; this block is done, the next starts in small mode.
        for (uint32_t w = 0; w < words; ++w) {
          for (uint64_t bits = s.still[w]; bits; bits &= bits - 1) {
            s.small.push_back(s.pos_of[w * 64 + std::countr_zero(bits)]);
          }
        }
        wide = false;
        ++b;
        break;
      }
      continue;
    }
    // Few holders (inline or sparse): the survivors are among them, at most 32.
    auto keep = [&](uint32_t h) {
      const TargetId t = HolderTarget(h);
      if ((t >> 6) >= words) return;
      uint64_t& word = s.still[t >> 6];
      const uint64_t bit = uint64_t{1} << (t & 63);
      if (!(word & bit)) return;
      word &= ~bit;  // survivors leave the bitset; what is left there dropped out
      const uint32_t pos = s.pos_of[t];
      s.small.push_back(pos);
      count_lower_tier(pos, HolderTiers(h));
    };
    keep(v);
    for (uint32_t w = 0; w < words; ++w) {
      for (uint64_t bits = s.still[w]; bits; bits &= bits - 1) {
        s.run[s.pos_of[w * 64 + std::countr_zero(bits)]] = static_cast<uint32_t>(b);
      }
    }
    remaining = s.small.size();
    wide = false;
    ++b;
    break;
  }

  if (wide) {
    // The walk ended (miss, end of chain, or nobody left) in wide mode.
    for (uint32_t w = 0; w < words; ++w) {
      for (uint64_t bits = s.still[w]; bits; bits &= bits - 1) {
        s.run[s.pos_of[w * 64 + std::countr_zero(bits)]] = static_cast<uint32_t>(b);
      }
    }
  } else {
    // Small mode: test each survivor against each block's holders.
    for (; b < blocks && !s.small.empty(); ++b) {
      const uint32_t v = holders_at(b);
      if (v == 0) break;
      for (size_t i = 0; i < s.small.size();) {
        const uint32_t pos = s.small[i];
        const uint32_t tiers = HolderTiers(Get(v, candidates[pos]));
        if (tiers == 0) {
          s.run[pos] = static_cast<uint32_t>(b);
          s.small[i] = s.small.back();
          s.small.pop_back();
          continue;
        }
        count_lower_tier(pos, tiers);
        ++i;
      }
    }
    for (uint32_t pos : s.small) s.run[pos] = static_cast<uint32_t>(b);
  }

  for (size_t pos = 0; pos < n; ++pos) {
    out[pos].device_hits = s.run[pos] - out[pos].host_hits - out[pos].disk_hits;
  }
}

// Bisection over the chain for prefix-closed, single-tier candidates (doc/index.md
// "The bisection"). positions[k] is candidates[k]'s slot in `out` (empty: k);
// max_t is the largest candidate id; all_device: every candidate bisects on device.
// REQUIRES: out is zeroed; every candidate is Bisectable(); candidates non-empty.
void KvIndex::Impl::Bisect(std::span<const BlockHash> chain, std::span<const TargetId> candidates,
                           std::span<const uint32_t> positions, std::span<MatchCounts> out,
                           TargetId max_t, bool all_device, bool setup_cached) const {
  using Probe = WalkScratch::Probe;
  using Segment = WalkScratch::Segment;
  WalkScratch& s = Scratch();
  const uint32_t blocks = static_cast<uint32_t>(chain.size());
  const uint32_t words = max_t / 64 + 1;
  const size_t n = candidates.size();
  if (!setup_cached) {
    s.fast.assign(words, 0);
    if (s.fast_pos_of.size() <= max_t) s.fast_pos_of.resize(max_t + 1);
  }
  uint64_t* fast = s.fast.data();
  uint32_t* pos_of = s.fast_pos_of.data();
  if (setup_cached) {
    // fast / pos_of are the previous call's, for the same candidates.
  } else if (positions.empty()) {
    for (size_t k = 0; k < n; ++k) {
      const TargetId t = candidates[k];
      fast[t >> 6] |= uint64_t{1} << (t & 63);
      pos_of[t] = static_cast<uint32_t>(k);
    }
  } else {
    for (size_t k = 0; k < n; ++k) {
      const TargetId t = candidates[k];
      fast[t >> 6] |= uint64_t{1} << (t & 63);
      pos_of[t] = positions[k];
    }
  }
  s.pool.clear();
  // Looks up chain[i] and records which bisected candidates hold it.
  auto probe = [&](uint32_t i) {
    Probe p{i, false, static_cast<uint32_t>(s.pool.size())};
    s.pool.resize(s.pool.size() + words, 0);
    uint64_t* bits = s.pool.data() + p.bits;
    const uint32_t r = rows.Find(chain[i]);
    if (r == kNoRow) return p;
    const uint32_t v = rows.slot(r).holders;
    auto add = [&](uint32_t h) {
      const TargetId t = HolderTarget(h);
      if ((t >> 6) < words) bits[t >> 6] |= uint64_t{1} << (t & 63);
    };
    if (!IsSet(v)) {
      if (v) add(v);
    } else if (const HolderSet* set = &SetOf(v); !set->dense) {
      for (uint32_t h : set->sparse) add(h);
    } else {
      const uint32_t row_words = std::min<uint32_t>(words, set->words);
      for (uint32_t w = 0; w < row_words; ++w) {
        bits[w] = set->plane(0)[w] | set->plane(1)[w] | set->plane(2)[w];
      }
    }
    uint64_t any = 0;
    for (uint32_t w = 0; w < words; ++w) {
      bits[w] &= s.fast[w];
      any |= bits[w];
    }
    p.any = any != 0;
    return p;
  };
  // Whether every candidate in `inner` is in `outer` (the nesting the bisection
  // relies on; it holds for prefix-closed views barring hash collisions).
  auto nested = [&](const Probe& outer, const Probe& inner) {
    const uint64_t* o = s.pool.data() + outer.bits;
    const uint64_t* in = s.pool.data() + inner.bits;
    for (uint32_t w = 0; w < words; ++w) {
      if (in[w] & ~o[w]) return false;
    }
    return true;
  };
  // Nested sets are equal or the inner one is smaller.
  auto same = [&](const Probe& a, const Probe& b) {
    return std::memcmp(s.pool.data() + a.bits, s.pool.data() + b.bits, words * sizeof(uint64_t)) ==
           0;
  };
  // Candidates holding `lo` but not `hi` (hi = lo + 1) have run length hi.
  auto resolve = [&](const Probe& lo, const Probe& hi) {
    const uint64_t* a = s.pool.data() + lo.bits;
    const uint64_t* b = s.pool.data() + hi.bits;
    for (uint32_t w = 0; w < words; ++w) {
      for (uint64_t d = a[w] & ~b[w]; d; d &= d - 1) {
        out[s.fast_pos_of[w * 64 + std::countr_zero(d)]].device_hits = hi.index;
      }
    }
  };
  const Probe first = probe(0);
  if (!first.any) return;  // nobody holds block 0
  if (blocks > 1) {
    rows.Prefetch(chain[blocks - 1]);
    rows.Prefetch(chain[(blocks - 1) / 2]);
  }
  bool ok = true;
  {
    const Probe last = blocks == 1 ? first : probe(blocks - 1);
    ok = nested(first, last);
    // Holders of the last block hold the whole chain.
    const uint64_t* bits = s.pool.data() + last.bits;
    for (uint32_t w = 0; ok && w < words; ++w) {
      for (uint64_t d = bits[w]; d; d &= d - 1) {
        out[s.fast_pos_of[w * 64 + std::countr_zero(d)]].device_hits = blocks;
      }
    }
    s.frontier.clear();
    if (ok && !same(first, last)) s.frontier.push_back({first, last});
    // Breadth first, so the probes of one level are independent and their cache
    // misses overlap (prefetched together).
    while (ok && !s.frontier.empty()) {
      s.next.clear();
      // While the frontier is small, also the two levels below (the mids either
      // half may need next): the dependent rounds then overlap too.
      const int depth = s.frontier.size() <= 4 ? 3 : 1;
      for (const Segment& seg : s.frontier) {
        PrefetchMids(chain, seg.lo.index, seg.hi.index, depth);
      }
      for (const Segment& seg : s.frontier) {
        if (seg.hi.index - seg.lo.index == 1) {
          resolve(seg.lo, seg.hi);
          continue;
        }
        const Probe mid = probe((seg.lo.index + seg.hi.index) / 2);
        if (!nested(seg.lo, mid) || !nested(mid, seg.hi)) {
          ok = false;
          break;
        }
        // The same set at both ends: nobody's run ends in between.
        if (!same(seg.lo, mid)) s.next.push_back({seg.lo, mid});
        if (!same(mid, seg.hi)) s.next.push_back({mid, seg.hi});
      }
      std::swap(s.frontier, s.next);
    }
  }
  auto slot = [&](size_t k) -> MatchCounts& { return out[positions.empty() ? k : positions[k]]; };
  if (!ok) {
    // Not nested: some view is not what its flags say (a hash collision). Stay exact.
    s.slow_ids.assign(candidates.begin(), candidates.end());
    s.slow_out.assign(n, MatchCounts{});
    LinearWalk(chain, s.slow_ids, s.slow_out);
    for (size_t k = 0; k < n; ++k) slot(k) = s.slow_out[k];
    return;
  }
  if (all_device) return;
  // Each run is on the target's only tier.
  for (size_t k = 0; k < n; ++k) {
    MatchCounts& m = slot(k);
    const uint32_t run = m.device_hits;
    const uint32_t tier = walk_mode[candidates[k]];
    if (tier == 1) m = MatchCounts{0, run, 0};
    if (tier == 2) m = MatchCounts{0, 0, run};
  }
}

void KvIndex::FindMatches(std::span<const BlockHash> chain, std::span<const TargetId> candidates,
                          std::span<MatchCounts> out) const {
  const size_t n = candidates.size();
  assert(out.size() == n);
  if (n > 0) std::memset(static_cast<void*>(out.data()), 0, n * sizeof(MatchCounts));
  if (n == 0 || chain.empty()) return;
  // The bisection's first probes are known now: their misses overlap the candidate
  // pass below (for a few candidates that pass is too short to hide the two
  // speculative ones, which a no-hit query would pay for; Bisect issues them then).
  const auto& rows = impl_->rows;
  const size_t blocks = chain.size();
  rows.Prefetch(chain[0]);
  if (n > 64) {
    rows.Prefetch(chain[blocks - 1]);
    rows.Prefetch(chain[(blocks - 1) / 2]);
  }
  const uint8_t* mode = impl_->walk_mode.data();
  WalkScratch& s = Scratch();
  auto& last = s.last;
  const bool same = last.instance == impl_->instance && last.generation == impl_->mode_generation &&
                    last.ids.size() == n &&
                    std::memcmp(last.ids.data(), candidates.data(), n * sizeof(TargetId)) == 0;
  if (!same) {
    TargetId max_t = 0;
    uint32_t modes_or = 0;
    for (TargetId t : candidates) {
      max_t = std::max(max_t, t);
      modes_or |= 1u << mode[t];
    }
    last.instance = impl_->instance;
    last.generation = impl_->mode_generation;
    last.ids.assign(candidates.begin(), candidates.end());
    last.max_t = max_t;
    last.modes_or = modes_or;
    last.bisect_ready = false;
  }
  const uint32_t modes_or = last.modes_or;
  if (modes_or == (1u << Impl::kWalk)) {
    impl_->LinearWalk(chain, candidates, out);
    return;
  }
  if (!(modes_or & (1u << Impl::kWalk))) {
    impl_->Bisect(chain, candidates, {}, out, last.max_t, /*all_device=*/modes_or == 1,
                  /*setup_cached=*/last.bisect_ready);
    last.bisect_ready = true;
    return;
  }
  // Mixed: each kind on its own subset.
  last.bisect_ready = false;
  s.fast_list.clear();
  s.slow_list.clear();
  for (uint32_t pos = 0; pos < n; ++pos) {
    (mode[candidates[pos]] != Impl::kWalk ? s.fast_list : s.slow_list).push_back(pos);
  }
  s.fast_ids.clear();
  TargetId fast_max = 0;
  for (uint32_t pos : s.fast_list) {
    s.fast_ids.push_back(candidates[pos]);
    fast_max = std::max(fast_max, candidates[pos]);
  }
  impl_->Bisect(chain, s.fast_ids, s.fast_list, out, fast_max, /*all_device=*/false);
  s.slow_ids.clear();
  for (uint32_t pos : s.slow_list) s.slow_ids.push_back(candidates[pos]);
  s.slow_out.assign(s.slow_ids.size(), MatchCounts{});
  impl_->LinearWalk(chain, s.slow_ids, s.slow_out);
  for (size_t k = 0; k < s.slow_list.size(); ++k) out[s.slow_list[k]] = s.slow_out[k];
}

size_t KvIndex::BlockCount(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t ? t->block_count : 0;
}

uint64_t KvIndex::ViewVersion(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t ? t->view_version : 0;
}

size_t KvIndex::TierBlockCount(TargetId id, Tier tier) const {
  const Impl::Target* t = impl_->Live(id);
  return t ? t->tier_entries[static_cast<size_t>(tier)] : 0;
}

size_t KvIndex::EntryCount() const { return impl_->entries; }

size_t KvIndex::DistinctHashCount() const { return impl_->rows.size() - impl_->kept_rows; }

size_t KvIndex::TableBytes() const {
  size_t bytes = impl_->rows.bytes() + impl_->sets.capacity() * sizeof(HolderSet);
  for (const Impl::Target& t : impl_->targets) bytes += t.engine_map.bytes();
  return bytes;
}

bool KvIndex::Holds(TargetId id, BlockHash router_hash, Tier tier) const {
  if (impl_->Live(id) == nullptr) return false;
  const uint32_t r = impl_->rows.Find(router_hash);
  return r != kNoRow && (HolderTiers(impl_->Get(impl_->rows.slot(r).holders, id)) & TierBit(tier));
}

std::vector<BlockHash> KvIndex::RouterHashes(TargetId id) const {
  std::vector<BlockHash> out;
  if (impl_->Live(id) == nullptr) return out;
  impl_->rows.ForEach([&](uint32_t r) {
    const Row& row = impl_->rows.slot(r);
    if (impl_->Get(row.holders, id) != 0) out.push_back(row.hash);
  });
  return out;
}

bool KvIndex::IsPrefixClosed(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t != nullptr && t->closed;
}

void KvIndex::SetMaxBlocks(TargetId id, size_t max_blocks) {
  ++impl_->generation;
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return;
  t->max_blocks = max_blocks;
  t->epoch_stored = 0;
  impl_->FinishPending(id, *t);
  impl_->MaybeEvict(id, *t);
  impl_->FinishPending(id, *t);
  impl_->Refresh(id);
  impl_->MaybeShrink();
}

size_t KvIndex::MaxBlocks(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t ? t->max_blocks : 0;
}

uint64_t KvIndex::EvictedBlocks(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t ? t->evicted : 0;
}

size_t KvIndex::MappedEngineHashCount(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t ? t->engine_map.size() : 0;
}

}  // namespace infera::core
