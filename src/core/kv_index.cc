#include "core/kv_index.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "core/hashing.h"

namespace infera::core {
namespace {

// ---------------------------------------------------------------------------------
// Holder sets (doc/index.md "Holder sets").
//
// The global table maps a router hash to a 64-bit word describing which targets hold
// it, and on which tiers:
//  * inline (bit 0 clear): two 32-bit holder slots, each 0 (empty) or
//      (target_id + 1) << 4 | tier_mask << 1
//  * heap (bit 0 set): pointer | 1 to a HolderSet, for 3 or more holders.
// tier_mask has bit t set when the target holds the block on Tier t.
// ---------------------------------------------------------------------------------

using Holders = uint64_t;
constexpr uint32_t kMaxTargets = (1u << 27);

constexpr uint32_t Encode(TargetId t, uint32_t tiers) { return ((t + 1) << 4) | (tiers << 1); }
constexpr TargetId HolderTarget(uint32_t h) { return (h >> 4) - 1; }
constexpr uint32_t HolderTiers(uint32_t h) { return (h >> 1) & 7u; }
constexpr uint32_t TierBit(Tier tier) { return 1u << static_cast<uint32_t>(tier); }

// A set switches to bitset planes above kDenseAbove holders and back to a sorted
// array below kSparseBelow (hysteresis keeps a block at the boundary from flapping).
constexpr uint32_t kDenseAbove = 32;
constexpr uint32_t kSparseBelow = 16;

struct HolderSet {
  uint32_t count = 0;  // holders
  bool dense = false;
  // Sparse: encoded holders sorted by target id.
  std::vector<uint32_t> sparse;
  // Dense: three planes (device, host, disk) of `words` 64-bit words each.
  uint32_t words = 0;
  std::unique_ptr<uint64_t[]> planes;

  uint64_t* plane(int tier) { return planes.get() + static_cast<size_t>(tier) * words; }
  const uint64_t* plane(int tier) const { return planes.get() + static_cast<size_t>(tier) * words; }
  uint32_t Tiers(TargetId t) const {
    if (!dense) {
      const uint32_t probe = Encode(t, 0);
      auto it = std::lower_bound(sparse.begin(), sparse.end(), probe);
      if (it != sparse.end() && HolderTarget(*it) == t) return HolderTiers(*it);
      return 0;
    }
    const uint32_t w = t >> 6;
    if (w >= words) return 0;
    const uint64_t bit = uint64_t{1} << (t & 63);
    return ((plane(0)[w] & bit) ? 1u : 0u) | ((plane(1)[w] & bit) ? 2u : 0u) |
           ((plane(2)[w] & bit) ? 4u : 0u);
  }
  void GrowPlanes(uint32_t new_words) {
    auto fresh = std::make_unique<uint64_t[]>(3 * static_cast<size_t>(new_words));
    std::memset(fresh.get(), 0, 3 * sizeof(uint64_t) * new_words);
    for (int p = 0; p < 3 && words > 0; ++p) {
      std::memcpy(fresh.get() + static_cast<size_t>(p) * new_words, plane(p),
                  sizeof(uint64_t) * words);
    }
    planes = std::move(fresh);
    words = new_words;
  }
  void ToDense() {
    uint32_t max_t = 0;
    for (uint32_t h : sparse) max_t = std::max(max_t, HolderTarget(h));
    words = 0;
    planes.reset();
    GrowPlanes(max_t / 64 + 1);
    for (uint32_t h : sparse) SetDense(HolderTarget(h), HolderTiers(h));
    sparse.clear();
    sparse.shrink_to_fit();
    dense = true;
  }
  void ToSparse() {
    std::vector<uint32_t> out;
    out.reserve(count);
    for (uint32_t w = 0; w < words; ++w) {
      uint64_t any = plane(0)[w] | plane(1)[w] | plane(2)[w];
      while (any) {
        const TargetId t = w * 64 + std::countr_zero(any);
        any &= any - 1;
        out.push_back(Encode(t, Tiers(t)));
      }
    }
    dense = false;
    planes.reset();
    words = 0;
    sparse = std::move(out);
  }
  void SetDense(TargetId t, uint32_t tiers) {
    const uint32_t w = t >> 6;
    if (w >= words) GrowPlanes(w + 1);
    const uint64_t bit = uint64_t{1} << (t & 63);
    for (int p = 0; p < 3; ++p) {
      if (tiers & (1u << p)) {
        plane(p)[w] |= bit;
      } else {
        plane(p)[w] &= ~bit;
      }
    }
  }
  // Sets the target's tiers (0 removes it); keeps `count` right.
  void Set(TargetId t, uint32_t tiers) {
    const uint32_t old = Tiers(t);
    if (old == tiers) return;
    if (dense) {
      SetDense(t, tiers);
    } else {
      const uint32_t probe = Encode(t, 0);
      auto it = std::lower_bound(sparse.begin(), sparse.end(), probe);
      if (old != 0) {
        if (tiers == 0) {
          sparse.erase(it);
        } else {
          *it = Encode(t, tiers);
        }
      } else {
        sparse.insert(it, Encode(t, tiers));
      }
    }
    if (old == 0) ++count;
    if (tiers == 0) --count;
    if (!dense && count > kDenseAbove) ToDense();
    if (dense && count < kSparseBelow) ToSparse();
  }
};

bool IsHeap(Holders v) { return v & 1; }
HolderSet* Heap(Holders v) { return reinterpret_cast<HolderSet*>(v & ~uint64_t{1}); }
uint32_t Lo(Holders v) { return static_cast<uint32_t>(v); }
uint32_t Hi(Holders v) { return static_cast<uint32_t>(v >> 32); }
Holders MakeInline(uint32_t lo, uint32_t hi) { return uint64_t{lo} | (uint64_t{hi} << 32); }

uint32_t TiersOf(Holders v, TargetId t) {
  if (IsHeap(v)) return Heap(v)->Tiers(t);
  const uint32_t lo = Lo(v), hi = Hi(v);
  if (lo != 0 && HolderTarget(lo) == t) return HolderTiers(lo);
  if (hi != 0 && HolderTarget(hi) == t) return HolderTiers(hi);
  return 0;
}

// Sets the target's tiers in `v` (0 removes the target), moving between the inline
// and heap forms. Returns false when `v` no longer has any holder (the caller erases
// the entry).
bool SetTiers(Holders& v, TargetId t, uint32_t tiers) {
  if (IsHeap(v)) {
    HolderSet* set = Heap(v);
    set->Set(t, tiers);
    if (set->count <= 2) {
      if (set->dense) set->ToSparse();
      const uint32_t lo = set->count > 0 ? set->sparse[0] : 0;
      const uint32_t hi = set->count > 1 ? set->sparse[1] : 0;
      delete set;
      v = MakeInline(lo, hi);
    }
    return v != 0;
  }
  uint32_t lo = Lo(v), hi = Hi(v);
  if (lo != 0 && HolderTarget(lo) == t) {
    lo = tiers ? Encode(t, tiers) : 0;
  } else if (hi != 0 && HolderTarget(hi) == t) {
    hi = tiers ? Encode(t, tiers) : 0;
  } else if (tiers != 0) {
    if (lo == 0) {
      lo = Encode(t, tiers);
    } else if (hi == 0) {
      hi = Encode(t, tiers);
    } else {
      auto* set = new HolderSet();
      set->sparse = {lo, hi, Encode(t, tiers)};
      std::sort(set->sparse.begin(), set->sparse.end());
      set->count = 3;
      assert((reinterpret_cast<uintptr_t>(set) & 1) == 0);
      v = reinterpret_cast<uintptr_t>(set) | 1;
      return true;
    }
  }
  v = MakeInline(lo, hi);
  return v != 0;
}

void FreeHolders(Holders v) {
  if (IsHeap(v)) delete Heap(v);
}

// How far ahead of the walk the table lookups are prefetched.
constexpr size_t kPrefetchDistance = 24;
// The walk keeps the still-matching candidates as a list (not a bitset) at or
// below this many.
constexpr size_t kSmallList = 4;

struct WalkScratch {
  std::vector<uint64_t> still;    // bitset over target ids (wide mode)
  std::vector<uint64_t> planes;   // a sparse row's holders as 3 bitsets (wide mode)
  std::vector<uint32_t> pos_of;   // target id -> candidate position
  std::vector<uint32_t> run;      // candidate position -> consecutive hits
  std::vector<uint32_t> small;    // candidate positions still matching (small mode)
  std::vector<BlockHash> hashes;  // ApplyStored's router hashes
};

WalkScratch& Scratch() {
  // Per thread, so concurrent readers (under a shared lock) do not race.
  thread_local WalkScratch scratch;
  return scratch;
}

}  // namespace

struct KvIndex::Impl {
  struct Target {
    TargetKey key;
    size_t block_size = 0;
    bool live = false;
    size_t block_count = 0;  // distinct router hashes held on any tier
    absl::flat_hash_map<BlockHash, BlockHash> engine_to_router;
    // Router hashes inserted without an engine mapping (InsertRouterHashes, count
    // mismatches): what ApplyCleared must also visit. May hold stale entries; it is
    // compacted when it outgrows the target's block count.
    std::vector<BlockHash> unmapped;
  };

  absl::flat_hash_map<BlockHash, Holders> table;
  std::vector<Target> targets;
  std::vector<TargetId> free_ids;
  absl::flat_hash_map<std::pair<std::string, uint32_t>, TargetId> by_key;
  size_t entries = 0;

  ~Impl() {
    for (auto& [hash, holders] : table) FreeHolders(holders);
  }

  Target* Live(TargetId id) {
    return id < targets.size() && targets[id].live ? &targets[id] : nullptr;
  }
  const Target* Live(TargetId id) const {
    return id < targets.size() && targets[id].live ? &targets[id] : nullptr;
  }

  // Adds `tier` for (id, hash). Returns true when the target did not hold the hash on
  // any tier before.
  bool AddTier(TargetId id, Target& t, BlockHash hash, uint32_t tier_bit) {
    Holders& v = table.try_emplace(hash, Holders{0}).first->second;
    const uint32_t old = TiersOf(v, id);
    if (old & tier_bit) return false;
    SetTiers(v, id, old | tier_bit);
    if (old == 0) {
      ++t.block_count;
      ++entries;
      return true;
    }
    return false;
  }

  // Drops `tier_mask` tiers of (id, hash). Returns (tiers dropped, tiers left).
  std::pair<uint32_t, uint32_t> DropTiers(TargetId id, Target& t, BlockHash hash,
                                          uint32_t tier_mask) {
    auto it = table.find(hash);
    if (it == table.end()) return {0, 0};
    const uint32_t old = TiersOf(it->second, id);
    const uint32_t dropped = old & tier_mask;
    if (dropped == 0) return {0, old};
    const uint32_t left = old & ~tier_mask;
    if (!SetTiers(it->second, id, left)) table.erase(it);
    if (left == 0) {
      --t.block_count;
      --entries;
    }
    return {dropped, left};
  }

  void Clear(TargetId id, Target& t) {
    for (const auto& [engine, router] : t.engine_to_router) DropTiers(id, t, router, 7);
    for (BlockHash router : t.unmapped) DropTiers(id, t, router, 7);
    // Swap with empties so the memory is returned, not just the elements.
    absl::flat_hash_map<BlockHash, BlockHash>().swap(t.engine_to_router);
    std::vector<BlockHash>().swap(t.unmapped);
    assert(t.block_count == 0);
    t.block_count = 0;
    // Give memory back when the table is mostly empty (a large target left).
    if (table.capacity() > 1024 && table.size() < table.capacity() / 8) table.rehash(0);
  }

  void NoteUnmapped(Target& t, BlockHash hash) {
    t.unmapped.push_back(hash);
    if (t.unmapped.size() > 2 * t.block_count + 1024) CompactUnmapped(t);
  }

  void CompactUnmapped(Target& t) {
    const TargetId id = static_cast<TargetId>(&t - targets.data());
    std::sort(t.unmapped.begin(), t.unmapped.end());
    t.unmapped.erase(std::unique(t.unmapped.begin(), t.unmapped.end()), t.unmapped.end());
    std::erase_if(t.unmapped, [&](BlockHash h) {
      auto it = table.find(h);
      return it == table.end() || TiersOf(it->second, id) == 0;
    });
    t.unmapped.shrink_to_fit();
  }
};

KvIndex::KvIndex() : impl_(std::make_unique<Impl>()) {}
KvIndex::~KvIndex() = default;

TargetId KvIndex::AddTarget(const TargetKey& key, size_t block_size) {
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
    if (id >= kMaxTargets) std::abort();  // 134M live targets: can't happen
    impl_->targets.emplace_back();
  }
  Impl::Target& t = impl_->targets[id];
  t.key = key;
  t.block_size = block_size;
  t.live = true;
  t.block_count = 0;
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
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return;
  impl_->Clear(id, *t);
  impl_->by_key.erase(std::make_pair(t->key.worker_id, t->key.dp_rank));
  t->live = false;
  t->key = TargetKey{};
  impl_->free_ids.push_back(id);
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
                                  std::span<const TokenId> tokens, Tier tier) {
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return StoreOutcome::kUnknownTarget;
  BlockHash parent = 0;
  if (parent_engine_hash.has_value()) {
    auto it = t->engine_to_router.find(*parent_engine_hash);
    if (it == t->engine_to_router.end()) return StoreOutcome::kUnknownParent;
    parent = it->second;
  }
  std::vector<BlockHash>& router = Scratch().hashes;
  router.clear();
  AppendChain(tokens, t->block_size, parent, router);
  // Prefetch every slot first so the inserts' cache misses overlap.
  for (BlockHash h : router) impl_->table.prefetch(h);
  const uint32_t bit = TierBit(tier);
  const bool mapped = engine_hashes.size() == router.size();
  if (mapped) t->engine_to_router.reserve(t->engine_to_router.size() + router.size());
  for (size_t i = 0; i < router.size(); ++i) {
    const bool fresh = impl_->AddTier(id, *t, router[i], bit);
    if (mapped) {
      t->engine_to_router.insert_or_assign(engine_hashes[i], router[i]);
    } else if (fresh) {
      impl_->NoteUnmapped(*t, router[i]);
    }
  }
  return mapped ? StoreOutcome::kOk : StoreOutcome::kCountMismatch;
}

RemoveResult KvIndex::ApplyRemoved(TargetId id, std::span<const BlockHash> engine_hashes,
                                   Tier tier) {
  RemoveResult result;
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) {
    result.unknown = engine_hashes.size();
    return result;
  }
  const uint32_t bit = TierBit(tier);
  for (BlockHash engine : engine_hashes) {
    auto it = t->engine_to_router.find(engine);
    if (it == t->engine_to_router.end()) {
      ++result.unknown;
      continue;
    }
    auto [dropped, left] = impl_->DropTiers(id, *t, it->second, bit);
    if (dropped) ++result.removed;
    if (left == 0) t->engine_to_router.erase(it);
  }
  return result;
}

void KvIndex::ApplyCleared(TargetId id) {
  Impl::Target* t = impl_->Live(id);
  if (t != nullptr) impl_->Clear(id, *t);
}

void KvIndex::InsertRouterHashes(TargetId id, std::span<const BlockHash> router_hashes, Tier tier) {
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return;
  for (size_t i = 0; i < router_hashes.size() && i < kPrefetchDistance; ++i) {
    impl_->table.prefetch(router_hashes[i]);
  }
  const uint32_t bit = TierBit(tier);
  for (size_t i = 0; i < router_hashes.size(); ++i) {
    if (i + kPrefetchDistance < router_hashes.size()) {
      impl_->table.prefetch(router_hashes[i + kPrefetchDistance]);
    }
    if (impl_->AddTier(id, *t, router_hashes[i], bit)) impl_->NoteUnmapped(*t, router_hashes[i]);
  }
}

size_t KvIndex::RemoveRouterHashes(TargetId id, std::span<const BlockHash> router_hashes,
                                   Tier tier) {
  Impl::Target* t = impl_->Live(id);
  if (t == nullptr) return 0;
  size_t removed = 0;
  for (BlockHash h : router_hashes) {
    if (impl_->DropTiers(id, *t, h, TierBit(tier)).first) ++removed;
  }
  return removed;
}

void KvIndex::FindMatches(std::span<const BlockHash> chain, std::span<const TargetId> candidates,
                          std::span<MatchCounts> out) const {
  const size_t n = candidates.size();
  assert(out.size() == n);
  for (auto& m : out) m = MatchCounts{};
  if (n == 0 || chain.empty()) return;

  WalkScratch& s = Scratch();
  s.run.assign(n, 0);
  const auto& table = impl_->table;
  const size_t blocks = chain.size();
  for (size_t i = 0; i < blocks && i < kPrefetchDistance; ++i) table.prefetch(chain[i]);

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
    if (b + kPrefetchDistance < blocks) table.prefetch(chain[b + kPrefetchDistance]);
    auto it = table.find(chain[b]);
    if (it == table.end()) break;
    const Holders v = it->second;
    const HolderSet* set = IsHeap(v) ? Heap(v) : nullptr;
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
    // Inline row (at most two holders): the survivors are among them.
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
    if (Lo(v)) keep(Lo(v));
    if (Hi(v)) keep(Hi(v));
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
      if (b + kPrefetchDistance < blocks) table.prefetch(chain[b + kPrefetchDistance]);
      auto it = table.find(chain[b]);
      if (it == table.end()) break;
      const Holders v = it->second;
      for (size_t i = 0; i < s.small.size();) {
        const uint32_t pos = s.small[i];
        const uint32_t tiers = TiersOf(v, candidates[pos]);
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

size_t KvIndex::BlockCount(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t ? t->block_count : 0;
}

size_t KvIndex::EntryCount() const { return impl_->entries; }

size_t KvIndex::DistinctHashCount() const { return impl_->table.size(); }

bool KvIndex::Holds(TargetId id, BlockHash router_hash, Tier tier) const {
  if (impl_->Live(id) == nullptr) return false;
  auto it = impl_->table.find(router_hash);
  return it != impl_->table.end() && (TiersOf(it->second, id) & TierBit(tier));
}

std::vector<BlockHash> KvIndex::RouterHashes(TargetId id) const {
  std::vector<BlockHash> out;
  if (impl_->Live(id) == nullptr) return out;
  for (const auto& [hash, holders] : impl_->table) {
    if (TiersOf(holders, id) != 0) out.push_back(hash);
  }
  return out;
}

size_t KvIndex::MappedEngineHashCount(TargetId id) const {
  const Impl::Target* t = impl_->Live(id);
  return t ? t->engine_to_router.size() : 0;
}

}  // namespace infera::core
