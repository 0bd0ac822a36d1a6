// Private to the KV index's sources (kv_index.cc, kv_index_snapshot.cc): the
// structure of doc/index.md "Structure" (holder words and sets, rows, engine maps)
// and KvIndex::Impl, which both define members of. Not for other code: everything
// here may change with the index.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "core/hashing.h"
#include "core/kv_index.h"
#include "core/open_table.h"

namespace infera::core {
namespace kv_index_internal {

// ---------------------------------------------------------------------------------
// Holder words and sets (doc/index.md "Structure").
//
// A row's 32-bit `holders` field says which targets hold the block, and on which
// tiers:
//  * bit 0 clear: the one holder's word, or 0 (nobody holds it: a kept parent row)
//  * bit 0 set: set index << 1 | 1, a HolderSet of 2 or more holders.
// Holder word: (target_id + 1) << 16 | children << 4 | tiers << 1; tiers has bit t
// set when the target holds the block on Tier t.
// ---------------------------------------------------------------------------------

// Target ids fit the 16-bit field of a holder word (doc/index.md "Holder words").
constexpr uint32_t kMaxTargets = (1u << 16) - 1;
// A holder's count of its own children (held blocks whose parent is this block)
// saturates here; a target that would go past it loses its prefix-closed flag.
constexpr uint32_t kMaxChildren = (1u << 12) - 1;

constexpr uint32_t Encode(TargetId t, uint32_t tiers, uint32_t children = 0) {
  return ((t + 1) << 16) | (children << 4) | (tiers << 1);
}
constexpr TargetId HolderTarget(uint32_t h) { return (h >> 16) - 1; }
constexpr uint32_t HolderTiers(uint32_t h) { return (h >> 1) & 7u; }
constexpr uint32_t HolderChildren(uint32_t h) { return (h >> 4) & kMaxChildren; }
constexpr uint32_t TierBit(Tier tier) { return 1u << static_cast<uint32_t>(tier); }
constexpr bool IsSet(uint32_t holders) { return holders & 1; }

// A set switches to bitset planes above kDenseAbove holders and back to a sorted
// array below kSparseBelow (hysteresis keeps a block at the boundary from flapping).
constexpr uint32_t kDenseAbove = 32;
constexpr uint32_t kSparseBelow = 16;

// One cache line: a probe of a row with 2..8 holders costs one dependent miss.
struct alignas(64) HolderSet {
  uint32_t count = 0;  // holders
  // Dense: three planes (device, host, disk) of `words` 64-bit words each (at most
  // 65536 / 64 = 1024), and the children count of every target id below words * 64.
  uint16_t words = 0;
  bool dense = false;
  // Sparse: holder words sorted by target id (up to 8 inside the set itself: a
  // fleet of 8 sharing a prefix needs no second allocation).
  absl::InlinedVector<uint32_t, 8> sparse;
  std::unique_ptr<uint64_t[]> planes;
  std::unique_ptr<uint16_t[]> children;

  // Back to an empty set, its memory freed (the pool slot is reused).
  void Reset() {
    count = 0;
    dense = false;
    sparse.clear();
    sparse.shrink_to_fit();
    words = 0;
    planes.reset();
    children.reset();
  }
  uint64_t* plane(int tier) { return planes.get() + static_cast<size_t>(tier) * words; }
  const uint64_t* plane(int tier) const { return planes.get() + static_cast<size_t>(tier) * words; }
  // The target's holder word, 0 when it does not hold the block.
  uint32_t Get(TargetId t) const {
    if (!dense) {
      auto it = std::lower_bound(sparse.begin(), sparse.end(), Encode(t, 0));
      if (it != sparse.end() && HolderTarget(*it) == t) return *it;
      return 0;
    }
    const uint32_t w = t >> 6;
    if (w >= words) return 0;
    const uint64_t bit = uint64_t{1} << (t & 63);
    const uint32_t tiers = ((plane(0)[w] & bit) ? 1u : 0u) | ((plane(1)[w] & bit) ? 2u : 0u) |
                           ((plane(2)[w] & bit) ? 4u : 0u);
    return tiers ? Encode(t, tiers, children[t]) : 0;
  }
  void GrowPlanes(uint32_t new_words) {
    auto fresh = std::make_unique<uint64_t[]>(3 * static_cast<size_t>(new_words));
    std::memset(fresh.get(), 0, 3 * sizeof(uint64_t) * new_words);
    auto fresh_children = std::make_unique<uint16_t[]>(64 * static_cast<size_t>(new_words));
    std::memset(fresh_children.get(), 0, 64 * sizeof(uint16_t) * new_words);
    for (int p = 0; p < 3 && words > 0; ++p) {
      std::memcpy(fresh.get() + static_cast<size_t>(p) * new_words, plane(p),
                  sizeof(uint64_t) * words);
    }
    if (words > 0) std::memcpy(fresh_children.get(), children.get(), 64 * sizeof(uint16_t) * words);
    planes = std::move(fresh);
    children = std::move(fresh_children);
    words = static_cast<uint16_t>(new_words);
  }
  void ToDense() {
    uint32_t max_t = 0;
    for (uint32_t h : sparse) max_t = std::max(max_t, HolderTarget(h));
    words = 0;
    planes.reset();
    children.reset();
    GrowPlanes(max_t / 64 + 1);
    for (uint32_t h : sparse) PutDense(HolderTarget(h), h);
    sparse.clear();
    sparse.shrink_to_fit();
    dense = true;
  }
  void ToSparse() {
    absl::InlinedVector<uint32_t, 8> out;
    out.reserve(count);
    for (uint32_t w = 0; w < words; ++w) {
      uint64_t any = plane(0)[w] | plane(1)[w] | plane(2)[w];
      while (any) {
        const TargetId t = w * 64 + std::countr_zero(any);
        any &= any - 1;
        out.push_back(Get(t));
      }
    }
    dense = false;
    planes.reset();
    children.reset();
    words = 0;
    sparse = std::move(out);
  }
  void PutDense(TargetId t, uint32_t word) {
    const uint32_t w = t >> 6;
    if (w >= words) GrowPlanes(w + 1);
    const uint64_t bit = uint64_t{1} << (t & 63);
    const uint32_t tiers = HolderTiers(word);
    for (int p = 0; p < 3; ++p) {
      if (tiers & (1u << p)) {
        plane(p)[w] |= bit;
      } else {
        plane(p)[w] &= ~bit;
      }
    }
    children[t] = static_cast<uint16_t>(tiers ? HolderChildren(word) : 0);
  }
  // Sets the target's holder word (0 removes it); keeps `count` right.
  void Put(TargetId t, uint32_t word) {
    const uint32_t old = Get(t);
    if (old == word) return;
    if (dense) {
      PutDense(t, word);
    } else {
      auto it = std::lower_bound(sparse.begin(), sparse.end(), Encode(t, 0));
      if (old != 0) {
        if (word == 0) {
          sparse.erase(it);
        } else {
          *it = word;
        }
      } else {
        sparse.insert(it, word);
      }
    }
    if (old == 0) ++count;
    if (word == 0) --count;
    if (!dense && count > kDenseAbove) ToDense();
    if (dense && count < kSparseBelow) ToSparse();
  }
};

// One row of the global table (16 bytes, four to a cache line).
//   link = parent row (27 bits) | child rows << 27 (5 bits, saturating at 31)
// parent: the row of the block's parent in its chain, kRoot, or kUnknownParent (the
// block came in unlinked, or its parent had no row). child rows: how many rows name
// this one as parent; a row nobody holds stays while it has child rows, so a parent
// index never dangles (doc/index.md "Rows").
struct Row {
  BlockHash hash;
  uint32_t holders;
  uint32_t link;
  uint64_t key() const { return hash; }
  void set_key(uint64_t k) { hash = k; }
};
static_assert(sizeof(Row) == 16);
static_assert(sizeof(HolderSet) == 64);
constexpr uint32_t kParentBits = 27;
constexpr uint32_t kParentMask = (1u << kParentBits) - 1;
constexpr uint32_t kRoot = kParentMask;
constexpr uint32_t kUnknownParent = kParentMask - 1;
constexpr uint32_t kMaxChildRows = 31;
constexpr uint32_t ParentOf(const Row& r) { return r.link & kParentMask; }
constexpr uint32_t ChildRows(const Row& r) { return r.link >> kParentBits; }
constexpr bool IsRow(uint32_t parent) { return parent < kUnknownParent; }

// One entry of a target's engine map: engine hash -> row (12 bytes).
//   word = row (27 bits) | epoch << 27 (5 bits: when the entry was last stored,
//   doc/index.md "Bounded views")
constexpr uint32_t kEpochs = 32;
struct EngineEntry {
  uint32_t lo, hi;
  uint32_t word;
  uint64_t key() const { return uint64_t{lo} | (uint64_t{hi} << 32); }
  void set_key(uint64_t k) {
    lo = static_cast<uint32_t>(k);
    hi = static_cast<uint32_t>(k >> 32);
  }
  uint32_t row() const { return word & kParentMask; }
  uint32_t epoch() const { return word >> kParentBits; }
  void set(uint32_t row, uint32_t epoch) { word = row | (epoch << kParentBits); }
};
static_assert(sizeof(EngineEntry) == 12);

using RowTable = OpenTable<Row, /*Huge=*/true>;
using EngineMap = OpenTable<EngineEntry>;
constexpr uint32_t kNoRow = RowTable::kNone;

// After a row-table rebuild, every stored row index goes through old_to_new (old slot
// -> new slot, kNoRow for a slot that was not full). Those reads are random: a cache
// miss each once the table has millions of rows (a rebuild at 8.4M rows spent ~2 s
// there, events_bench BM_FleetGrowthPlan). Both walks below go through their table
// in slot order and prefetch the old_to_new entry of the full slot kTranslateAhead
// slots further.
constexpr size_t kTranslateAhead = 32;
// Each row's parent (when a row) through old_to_new.
inline void TranslateParents(RowTable& rows, const std::vector<uint32_t>& old_to_new) {
  const size_t cap = rows.capacity();
  for (size_t i = 0; i < cap; ++i) {
    const size_t j = i + kTranslateAhead;
    if (j < cap && rows.full(static_cast<uint32_t>(j))) {
      const uint32_t p = ParentOf(rows.slot(static_cast<uint32_t>(j)));
      if (IsRow(p) && p < old_to_new.size()) __builtin_prefetch(&old_to_new[p]);
    }
    if (!rows.full(static_cast<uint32_t>(i))) continue;
    Row& r = rows.slot(static_cast<uint32_t>(i));
    const uint32_t p = ParentOf(r);
    if (IsRow(p)) r.link = (r.link & ~kParentMask) | old_to_new[p];
  }
}
// Calls f(slot, new row) for every entry of `map` (new row: kNoRow when the entry's
// row is not in old_to_new). f may erase that slot.
template <typename F>
void ForEachEntryTranslated(EngineMap& map, const std::vector<uint32_t>& old_to_new, F&& f) {
  const size_t cap = map.capacity();
  for (size_t i = 0; i < cap; ++i) {
    const size_t j = i + kTranslateAhead;
    if (j < cap && map.full(static_cast<uint32_t>(j))) {
      const uint32_t r = map.slot(static_cast<uint32_t>(j)).row();
      if (r < old_to_new.size()) __builtin_prefetch(&old_to_new[r]);
    }
    if (!map.full(static_cast<uint32_t>(i))) continue;
    const uint32_t r = map.slot(static_cast<uint32_t>(i)).row();
    f(static_cast<uint32_t>(i), r < old_to_new.size() ? old_to_new[r] : kNoRow);
  }
}

// How far ahead of the linear walk the table lookups are prefetched.
constexpr size_t kPrefetchDistance = 24;
// The linear walk looks rows up this many blocks before it uses them (and
// prefetches their holder sets then); the ring of looked-up rows is kLookRing long.
constexpr size_t kLookAhead = 8;
constexpr size_t kLookRing = 16;
static_assert(kLookAhead < kLookRing && kLookAhead < kPrefetchDistance);
// The walk keeps the still-matching candidates as a list (not a bitset) at or
// below this many.
constexpr size_t kSmallList = 4;

struct WalkScratch {
  // Linear walk.
  std::vector<uint64_t> still;   // bitset over target ids (wide mode)
  std::vector<uint64_t> planes;  // a sparse row's holders as 3 bitsets (wide mode)
  std::vector<uint32_t> pos_of;  // target id -> candidate position
  std::vector<uint32_t> run;     // candidate position -> consecutive hits
  std::vector<uint32_t> small;   // candidate positions still matching (small mode)
  // Bisection.
  std::vector<uint64_t> fast;         // bitset over target ids of the bisected candidates
  std::vector<uint32_t> fast_pos_of;  // target id -> candidate position
  std::vector<uint64_t> pool;         // one holder bitset per probe
  struct Probe {
    uint32_t index;  // chain position
    bool any;        // some bisected candidate holds it
    uint32_t bits;   // offset of its bitset in `pool`
  };
  struct Segment {
    Probe lo, hi;
  };
  std::vector<Segment> frontier, next;
  // Candidates of each kind, and the linear walk's results for its subset.
  std::vector<uint32_t> fast_list, slow_list;
  std::vector<TargetId> fast_ids, slow_ids;
  std::vector<MatchCounts> slow_out;
  std::vector<BlockHash> hashes;  // ApplyStored's router hashes
  // The previous call's candidate set (routers ask about the same pool again and
  // again): its summary, and whether fast/fast_pos_of still describe it.
  struct {
    uint64_t instance = 0;
    uint64_t generation = 0;
    std::vector<TargetId> ids;
    TargetId max_t = 0;
    uint32_t modes_or = 0;
    bool bisect_ready = false;
  } last;
};

// Distinguishes indexes for the per-thread candidate cache (an index at the address
// of a destroyed one is a different instance).
inline uint64_t NextInstance() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

inline WalkScratch& Scratch() {
  // Per thread, so concurrent readers (under a shared lock) do not race.
  thread_local WalkScratch scratch;
  return scratch;
}

}  // namespace kv_index_internal

using namespace kv_index_internal;  // NOLINT: the index's own sources only

struct KvIndex::Impl {
  // The bound's eviction sweep of one target, done in steps (doc/index.md "Bounded
  // views" and "Bounded work"). The marks live in the target's own holder words, in
  // the children field (unused while the target is not closed; Recheck recounts it at
  // the end): no temporary map, and they move with the rows when another writer
  // rebuilds the row table between two steps. A walk paused between steps keeps the
  // row it stands on by hash for the same reason.
  struct Sweep {
    enum class Phase : uint8_t { kOrder, kMark, kDrop, kZero, kCount };
    Phase phase = Phase::kOrder;
    size_t goal = 0;
    size_t before = 0;   // blocks when the sweep began
    uint32_t keep0 = 0;  // the histogram's guess of epochs kept
    uint32_t keep = 0;   // the epochs kept
    size_t cursor = 0;   // position in the current pass
    // The map's entries (slot indices) by increasing age: age a at
    // [age_begin[a], age_begin[a + 1]).
    std::vector<uint32_t> order;
    size_t age_begin[kEpochs + 1] = {};
    size_t fill[kEpochs] = {};
    size_t held_at_age[kEpochs] = {};  // rows first marked held by an entry of each age
    // The walk of order[cursor]: kWalking marks the rows it passed (kUp), then the
    // same rows get their final mark (kDown, from the entry's row again). `at`: the
    // row it stands on (kAtRow: the row of at_hash).
    enum class Walk : uint8_t { kIdle, kUp, kDown };
    Walk walk = Walk::kIdle;
    enum class At : uint8_t { kAtRow, kAtRoot, kAtNothing };
    At at = At::kAtRow;
    BlockHash at_hash = 0;
    uint32_t final_mark = 0;
    bool ok = true;  // the recheck's verdict so far
  };
  // A mark (12 bits): 0 none; 1 + (age | kHeld | kClaimed) final; kWalking on a walk.
  static constexpr uint32_t kMarkHeld = 0x20;
  static constexpr uint32_t kMarkClaimed = 0x40;
  static constexpr uint32_t kWalking = 0x800;

  struct Target {
    TargetKey key;
    size_t block_size = 0;
    bool live = false;
    size_t block_count = 0;  // distinct router hashes held on any tier
    // KvIndex::ViewVersion: stamped from view_clock whenever a (hash, tier) the
    // target holds is added or dropped, and when the target is added or cleared.
    uint64_t view_version = 0;
    // (target, hash) entries holding each tier.
    size_t tier_entries[kTierCount] = {0, 0, 0};
    // Prefix-closed (doc/index.md "Prefix-closed views"): every block the target
    // holds is a chain root or its parent is held by the target too, and every
    // holder word's children count is exact. Cleared by anything that may break
    // that; set again when the target is emptied.
    bool closed = true;
    // Engine hash -> row of the router hash. Every entry names a row the target
    // holds (so the row is never erased while the entry exists).
    EngineMap engine_map;
    // Whether some router hashes were inserted without an engine mapping
    // (InsertRouterHashes, count mismatches) since the last clear: then a clear must
    // scan the whole table instead of visiting the map's values. A list of them would
    // cost 8-16 bytes per entry; clearing such a target is rare.
    bool has_unmapped = false;
    // Whether two engine hashes may name the same row (an engine hash stored for a
    // block the target already held): then removals purge entries of rows the
    // target no longer holds, so no entry outlives its row.
    bool aliased = false;
    // Blocks still to apply before the next attempt to prove the view prefix-closed
    // again after it lost the flag (Recheck).
    size_t recheck_in = 0;
    // The bound (doc/index.md "Bounded views"): 0 = none. Engine-map entries carry
    // the epoch they were last stored in; `epoch` advances every EpochStep() stored
    // blocks; epoch_entries[e] counts the entries of epoch e.
    size_t max_blocks = 0;
    uint32_t epoch = 0;
    size_t epoch_stored = 0;  // blocks stored in the current epoch
    uint32_t epoch_entries[kEpochs] = {};
    uint64_t evicted = 0;              // blocks evicted since the target was added
    bool evicted_since_clear = false;  // then an unknown parent may be an evicted block
    // Deferred work (doc/index.md "Bounded work"). purge_pending: some engine-map
    // entries may name rows the target no longer holds (aliases of removed blocks);
    // a scan from purge_cursor erases them. sweep: the bound's eviction in progress.
    // Both finish before the target's next store.
    bool purge_pending = false;
    size_t purge_cursor = 0;
    std::unique_ptr<Sweep> sweep;

    // Whether the walk may bisect this target: prefix-closed, and every block held
    // on the same single tier (so the run's tier split is the run itself).
    bool Bisectable() const {
      if (!closed) return false;
      int tiers = 0;
      for (size_t n : tier_entries) tiers += n > 0;
      return tiers <= 1;
    }
    uint32_t OnlyTier() const {
      for (uint32_t p = 0; p < kTierCount; ++p) {
        if (tier_entries[p] > 0) return p;
      }
      return 0;
    }
  };

  RowTable rows;
  // Rows nobody holds, kept because other rows name them as parent.
  size_t kept_rows = 0;
  // Holder sets of rows with 2 or more holders; free slots of `sets`.
  std::vector<HolderSet> sets;  // by value: a set index is one step from its holders
  std::vector<uint32_t> free_sets;
  std::vector<Target> targets;
  // Per target id, how FindMatches answers for it: kWalk, or bisection with every
  // hit on tier `mode` (kept next to each other so the walk reads one byte per
  // candidate).
  static constexpr uint8_t kWalk = 3;
  std::vector<uint8_t> walk_mode;
  // Bumped whenever a walk mode changes or a target goes (FindMatches' cache).
  uint64_t mode_generation = 0;
  const uint64_t instance = NextInstance();
  // The view versions' clock: each index's starts at its instance × 2^40, so no
  // version repeats across targets, reused ids or indexes (a restored one swapped in).
  uint64_t view_clock = instance << 40;
  void Stamp(Target& t) { t.view_version = ++view_clock; }
  std::vector<TargetId> free_ids;
  // NoteSaltedTraffic (written by request threads under the read lock, or none).
  std::atomic<bool> salted_traffic{false};
  absl::flat_hash_map<std::pair<std::string, uint32_t>, TargetId> by_key;
  size_t entries = 0;
  std::vector<uint32_t> old_to_new;  // Rebuild's translation (freed after use)
  // Kept rows left without child rows by a cascade cut short (EraseRow), by hash.
  std::vector<BlockHash> erase_backlog;
  // Bumped by every write: a GrowthPlan prepared at another value is stale.
  uint64_t generation = 0;
  // Rows KvIndex::Reserve asked room for: MaybeShrink keeps that capacity until the
  // table holds as many rows (0: none).
  size_t rows_floor = 0;

  Target* Live(TargetId id) {
    return id < targets.size() && targets[id].live ? &targets[id] : nullptr;
  }
  const Target* Live(TargetId id) const {
    return id < targets.size() && targets[id].live ? &targets[id] : nullptr;
  }

  // ---- holder words ----
  const HolderSet& SetOf(uint32_t holders) const { return sets[holders >> 1]; }
  // The target's holder word in `holders`, 0 when it does not hold the block.
  uint32_t Get(uint32_t holders, TargetId t) const {
    if (IsSet(holders)) return SetOf(holders).Get(t);
    return holders != 0 && HolderTarget(holders) == t ? holders : 0;
  }
  // Sets the target's holder word (0 removes the target), moving between the inline
  // and set forms.
  void Put(uint32_t& holders, TargetId t, uint32_t word) {
    if (!IsSet(holders) && (holders == 0 || HolderTarget(holders) == t)) {
      holders = word;  // the common case: the block's only holder
      return;
    }
    PutSlow(holders, t, word);
  }
  __attribute__((noinline)) void PutSlow(uint32_t& holders, TargetId t, uint32_t word) {
    if (IsSet(holders)) {
      HolderSet& set = sets[holders >> 1];
      set.Put(t, word);
      if (set.count <= 1) {
        if (set.dense) set.ToSparse();
        const uint32_t only = set.count ? set.sparse[0] : 0;
        sets[holders >> 1].Reset();
        free_sets.push_back(holders >> 1);
        holders = only;
      }
      return;
    }
    if (holders == 0 || HolderTarget(holders) == t) {
      holders = word;
      return;
    }
    if (word == 0) return;  // t held nothing here
    uint32_t index;
    if (!free_sets.empty()) {
      index = free_sets.back();
      free_sets.pop_back();
    } else {
      index = static_cast<uint32_t>(sets.size());
      if (index >= (1u << 31)) std::abort();
      sets.emplace_back();
    }
    HolderSet& set = sets[index];
    set.sparse = {std::min(holders, word), std::max(holders, word)};
    set.count = 2;
    holders = (index << 1) | 1;
  }

  // ---- rows ----
  // Room for `more` new rows; a rebuild moves rows, so every stored row index (the
  // rows' parents, the engine maps) is translated. Returns whether rows moved.
  bool ReserveRows(size_t more) {
    if (!rows.Reserve(more, &old_to_new)) return false;
    Translate();
    return true;
  }
  void Translate() {
    TranslateParents(rows, old_to_new);
    for (Target& t : targets) {
      if (!t.live) continue;
      ForEachEntryTranslated(t.engine_map, old_to_new, [&](uint32_t i, uint32_t to) {
        // An entry of a pending purge may name a row erased since: it goes now.
        if (to == kNoRow) {
          EraseEntry(t, i);
        } else {
          EngineEntry& e = t.engine_map.slot(i);
          e.set(to, e.epoch());
        }
      });
    }
    std::vector<uint32_t>().swap(old_to_new);  // 4 bytes per old slot: not kept
  }
  // Gives memory back when the table is mostly empty.
  // A reservation (KvIndex::Reserve: a snapshot's staging build) is kept until the
  // table holds as many rows: a refused record cleared meanwhile must not shrink it.
  void MaybeShrink() {
    if (rows_floor != 0 && rows.size() >= rows_floor) rows_floor = 0;
    if (entries == 0 && rows.capacity() > 0 && !(rows_floor != 0 && rows.size() == 0)) {
      // Nothing held: kept parent rows go too (nothing can name them but entries a
      // pending purge would erase: they go now).
      for (Target& t : targets) {
        if (!t.live || t.engine_map.size() == 0) continue;
        t.engine_map.Clear();
        for (uint32_t& n : t.epoch_entries) n = 0;
        t.purge_pending = false;
        t.purge_cursor = 0;
      }
      rows.Clear();
      if (rows_floor != 0) rows.Reserve(rows_floor, nullptr);  // (empty: nothing moves)
      kept_rows = 0;
      std::vector<BlockHash>().swap(erase_backlog);
      return;
    }
    if (rows_floor == 0 && rows.capacity() > 1024 && rows.size() < rows.capacity() / 8) {
      rows.Rebuild(rows.size(), &old_to_new);
      Translate();
    }
  }
  void AddChildRow(uint32_t parent) {
    Row& p = rows.slot(parent);
    if (ChildRows(p) < kMaxChildRows) p.link += 1u << kParentBits;
  }
  // Erases row i (nobody holds it, no row names it) and then every parent left
  // unheld without child rows. A chain of kept rows can be as long as the view (a
  // chain removed root first, or evicted in any order): past kCascadeRows the rest
  // waits in erase_backlog (pending work: doc/index.md "Bounded work").
  static constexpr size_t kCascadeRows = 64;
  void EraseRow(uint32_t i) {
    for (size_t erased = 0;; ++erased) {
      const uint32_t parent = ParentOf(rows.slot(i));
      rows.Erase(i);
      if (!IsRow(parent)) return;
      Row& p = rows.slot(parent);
      const uint32_t n = ChildRows(p);
      if (n == kMaxChildRows) return;  // saturated: kept until the table empties
      p.link -= 1u << kParentBits;
      if (n != 1 || p.holders != 0) return;
      if (erased + 1 == kCascadeRows) {
        // Stays a kept row without child rows (a miss for readers) until drained.
        erase_backlog.push_back(p.hash);
        return;
      }
      --kept_rows;
      i = parent;
    }
  }
  // Erases up to about `budget` rows of the backlog (each with its ancestors, at most
  // kCascadeRows a time). Returns the units done.
  size_t DrainEraseBacklog(size_t budget) {
    size_t done = 0;
    while (done < budget && !erase_backlog.empty()) {
      const uint32_t r = rows.Find(erase_backlog.back());
      erase_backlog.pop_back();
      done += kCascadeRows;
      // (Held again, or a child row came, since: it stays.)
      if (r == kNoRow || rows.slot(r).holders != 0 || ChildRows(rows.slot(r)) != 0) continue;
      --kept_rows;
      EraseRow(r);
    }
    return done;
  }
  // Row i lost its last holder.
  void Unheld(uint32_t i) {
    if (ChildRows(rows.slot(i)) == 0) {
      EraseRow(i);
    } else {
      ++kept_rows;
    }
  }

  // ---- the bound (doc/index.md "Bounded views") ----
  static size_t EpochStep(const Target& t) { return std::max<size_t>(1, t.max_blocks / 16); }
  static uint32_t Age(const Target& t, uint32_t epoch) {
    return (t.epoch + kEpochs - epoch) % kEpochs;
  }
  void EraseEntry(Target& t, uint32_t e) {
    --t.epoch_entries[t.engine_map.slot(e).epoch()];
    t.engine_map.Erase(e);
  }
  // Entry e (just stored or re-stored) gets the current epoch; a bounded target's
  // epoch advances every EpochStep() stored blocks.
  void Stamp(Target& t, uint32_t e, uint32_t row, bool inserted) {
    EngineEntry& entry = t.engine_map.slot(e);
    if (!inserted) --t.epoch_entries[entry.epoch()];
    entry.set(row, t.epoch);
    ++t.epoch_entries[t.epoch];
    if (t.max_blocks == 0 || ++t.epoch_stored < EpochStep(t)) return;
    t.epoch_stored = 0;
    const uint32_t next = (t.epoch + 1) % kEpochs;
    if (t.epoch_entries[next] > 0) {
      // Entries 32 epochs old would look new: they join the oldest epoch left (ages
      // saturate at 31). Slots do not move: entry indices stay valid.
      const uint32_t oldest = (next + 1) % kEpochs;
      t.engine_map.ForEach([&](uint32_t i) {
        EngineEntry& x = t.engine_map.slot(i);
        if (x.epoch() == next) x.set(x.row(), oldest);
      });
      t.epoch_entries[oldest] += t.epoch_entries[next];
      t.epoch_entries[next] = 0;
    }
    t.epoch = next;
  }
  // The end of a step over [cursor, limit) of at most `budget` items.
  static size_t StepEnd(size_t cursor, size_t limit, size_t budget) {
    return cursor + std::min(limit - std::min(cursor, limit), budget);
  }
  // Past the bound (blocks or engine-map entries), an eviction sweep begins; it runs
  // as pending work (DoPending). A view whose unmapped blocks cannot be aged is
  // cleared at once.
  void MaybeEvict(TargetId id, Target& t) {
    if (t.max_blocks == 0 || t.sweep != nullptr) return;
    if (t.block_count <= t.max_blocks && t.engine_map.size() <= t.max_blocks) return;
    t.evicted_since_clear = true;
    if (t.has_unmapped) {
      // Blocks without an engine mapping (count mismatches) cannot be aged.
      const size_t before = t.block_count;
      Clear(id, t);
      t.evicted += before;
      t.evicted_since_clear = true;
      return;
    }
    t.sweep = std::make_unique<Sweep>();
    Sweep& w = *t.sweep;
    w.goal = t.max_blocks - t.max_blocks / 16;
    w.before = t.block_count;
    // The histogram's first guess: the youngest ages whose entries fit the goal.
    size_t entries_kept = 0;
    while (w.keep0 < kEpochs) {
      const size_t n = t.epoch_entries[(t.epoch + kEpochs - w.keep0) % kEpochs];
      if (entries_kept + n > w.goal) break;
      entries_kept += n;
      ++w.keep0;
    }
    size_t at = 0;
    for (uint32_t a = 0; a < kEpochs; ++a) {
      w.age_begin[a] = w.fill[a] = at;
      at += t.epoch_entries[(t.epoch + kEpochs - a) % kEpochs];
    }
    w.age_begin[kEpochs] = at;
    w.order.resize(at);
    // No children bookkeeping while blocks go: the walk answers for the target until
    // the sweep's recheck proves the view prefix-closed again.
    t.closed = false;
    Refresh(id);
  }

  // One step of the sweep (about `budget` units, at least one); returns the units.
  // Brings the view to at most goal = max_blocks − max_blocks / 16 blocks: it keeps
  // the blocks stored in the youngest `keep` epochs together with their chains to the
  // root, for the largest `keep` that fits, and drops the rest, so the view stays
  // prefix-closed (an evicted block has no kept descendant); of the engine hashes of a
  // kept block, only the youngest stays.
  //   kOrder  one pass over the map: the entries by age (counting sort)
  //   kMark   from each entry younger than keep0, in age order, the walk to the root
  //           marks each row with the age of the youngest entry below it; a walk stops
  //           at a marked row, so each row is read once; kept(k) = rows marked held
  //           with an age below k
  //   kDrop   in age order: an entry of a kept row stays if it is the row's first
  //           (youngest), else it goes; an entry of another row drops the row
  //   kZero, kCount  Recheck in two passes
  size_t SweepStep(TargetId id, Target& t, size_t budget) {
    using Phase = Sweep::Phase;
    Sweep& w = *t.sweep;
    size_t done = 0;
    EngineMap& map = t.engine_map;
    while (done < budget) {
      switch (w.phase) {
        case Phase::kOrder: {
          const size_t end = StepEnd(w.cursor, map.capacity(), budget - done);
          for (; w.cursor < end; ++w.cursor, ++done) {
            const uint32_t e = static_cast<uint32_t>(w.cursor);
            if (!map.full(e)) continue;
            const uint32_t age = Age(t, map.slot(e).epoch());
            if (w.fill[age] >= w.age_begin[age + 1]) std::abort();  // histogram is off: a bug
            w.order[w.fill[age]++] = e;
            SetMark(id, map.slot(e).row(), 0);  // (every held row has an entry)
          }
          if (w.cursor == map.capacity()) {
            w.phase = Phase::kMark;
            w.cursor = 0;
          }
          break;
        }
        case Phase::kMark:
          done += MarkStep(id, t, w, budget - done);
          break;
        case Phase::kDrop: {
          const size_t end = StepEnd(w.cursor, w.order.size(), budget - done);
          for (; w.cursor < end; ++w.cursor, ++done) {
            const uint32_t e = w.order[w.cursor];
            if (!map.full(e)) continue;
            const uint32_t row = map.slot(e).row();
            const uint32_t mark = MarkOf(id, row);
            const bool kept = mark != 0 && mark != kWalking && ((mark - 1) & kMarkHeld) &&
                              ((mark - 1) & 0x1f) < w.keep;
            if (kept && !((mark - 1) & kMarkClaimed)) {
              SetMark(id, row, 1 + ((mark - 1) | kMarkClaimed));
              continue;
            }
            if (!kept) DropTiers(id, t, row, 7);
            EraseEntry(t, e);
          }
          if (w.cursor == w.order.size()) {
            t.evicted += w.before - t.block_count;
            t.aliased = false;  // one entry per kept block
            std::vector<uint32_t>().swap(w.order);
            w.phase = Phase::kZero;
            w.cursor = 0;
            w.ok = map.size() == t.block_count;
          }
          break;
        }
        case Phase::kZero:
        case Phase::kCount: {
          const bool zero = w.phase == Phase::kZero;
          const size_t end = StepEnd(w.cursor, map.capacity(), budget - done);
          for (; w.ok && w.cursor < end; ++w.cursor, ++done) {
            const uint32_t e = static_cast<uint32_t>(w.cursor);
            if (map.full(e))
              w.ok =
                  zero ? RecheckZero(id, map.slot(e).row()) : RecheckCount(id, map.slot(e).row());
          }
          if (!w.ok || w.cursor == map.capacity()) {
            if (zero && w.ok) {
              w.phase = Phase::kCount;
              w.cursor = 0;
              break;
            }
            t.closed = w.ok;
            if (!t.closed) t.recheck_in = 4 * t.block_count + 64;
            t.sweep.reset();
            Refresh(id);
            MaybeShrink();
            return std::max<size_t>(done, 1);
          }
          break;
        }
      }
    }
    return done;
  }
  // kMark's walks, from the entries younger than keep0 (w.cursor indexes w.order),
  // youngest first. Up from the entry's row to the root, a row the target does not
  // hold, or a row marked before: each row passed gets kWalking; then down the same
  // rows again, each gets 1 + (age | held): held when the walk ended at the root or at
  // a row marked held. Each row is walked at most twice over the sweep.
  size_t MarkStep(TargetId id, Target& t, Sweep& w, size_t budget) {
    using Walk = Sweep::Walk;
    using At = Sweep::At;
    size_t done = 0;
    const size_t end = w.age_begin[w.keep0];
    while (done < budget) {
      if (w.walk == Walk::kIdle) {
        if (w.cursor == end) {
          // kept(k) = rows marked held with an age below k: the largest k <= keep0 that fits.
          w.keep = w.keep0;
          size_t kept = 0;
          for (uint32_t a = 0; a < w.keep; ++a) kept += w.held_at_age[a];
          while (w.keep > 0 && kept > w.goal) kept -= w.held_at_age[--w.keep];
          w.phase = Sweep::Phase::kDrop;
          w.cursor = 0;
          return std::max<size_t>(done, 1);
        }
        const uint32_t e = w.order[w.cursor];
        ++done;  // (a walk that stops at once still costs its entry's visit)
        if (!t.engine_map.full(e)) {
          ++w.cursor;
          continue;
        }
        w.walk = Walk::kUp;
        w.at = At::kAtRow;
        w.at_hash = rows.slot(t.engine_map.slot(e).row()).hash;
      }
      uint32_t r = w.at == At::kAtRoot      ? kRoot
                   : w.at == At::kAtNothing ? kUnknownParent
                                            : rows.Find(w.at_hash);
      if (r == kNoRow) r = kUnknownParent;
      // The age of the walk's entry: the bucket w.cursor is in.
      uint32_t age = 0;
      while (w.age_begin[age + 1] <= w.cursor) ++age;
      if (w.walk == Walk::kUp) {
        bool ended = false;
        bool held = false;
        for (; done < budget; ++done) {
          if (r == kRoot) {
            held = ended = true;
            break;
          }
          if (!IsRow(r) || Get(rows.slot(r).holders, id) == 0) {
            ended = true;
            break;
          }
          const uint32_t mark = MarkOf(id, r);
          if (mark != 0) {
            // Marked before (or on this walk: a cycle, only possible with a hash
            // collision: not held).
            held = mark != kWalking && ((mark - 1) & kMarkHeld);
            ended = true;
            break;
          }
          SetMark(id, r, kWalking);
          r = ParentOf(rows.slot(r));
        }
        if (!ended) {
          SaveAt(w, r);
          return done;
        }
        w.final_mark = 1 + (age | (held ? kMarkHeld : 0));
        w.walk = Walk::kDown;
        SaveAt(w, t.engine_map.slot(w.order[w.cursor]).row());
        continue;
      }
      // kDown: from the entry's row while the rows carry kWalking.
      for (; done < budget; ++done) {
        if (!IsRow(r) || MarkOf(id, r) != kWalking) {
          w.walk = Walk::kIdle;
          ++w.cursor;
          break;
        }
        SetMark(id, r, w.final_mark);
        if ((w.final_mark - 1) & kMarkHeld) ++w.held_at_age[age];
        r = ParentOf(rows.slot(r));
      }
      if (w.walk == Walk::kDown) SaveAt(w, r);
    }
    return done;
  }
  void SaveAt(Sweep& w, uint32_t r) {
    w.at = r == kRoot ? Sweep::At::kAtRoot : IsRow(r) ? Sweep::At::kAtRow : Sweep::At::kAtNothing;
    w.at_hash = IsRow(r) ? rows.slot(r).hash : 0;
  }
  // The target's sweep mark of row i (its holder word's children field).
  // REQUIRES: the target holds row i.
  uint32_t MarkOf(TargetId id, uint32_t i) const {
    return HolderChildren(Get(rows.slot(i).holders, id));
  }
  void SetMark(TargetId id, uint32_t i, uint32_t mark) {
    Row& r = rows.slot(i);
    const uint32_t w = Get(r.holders, id);
    if (w != 0) Put(r.holders, id, (w & ~(kMaxChildren << 4)) | (mark << 4));
  }

  // Deferred work of the target, about `budget` units (at least one when some is
  // pending). The purge goes first: the sweep reads the entries' rows.
  // (The erase backlog is the index's, drained by whichever target's writer comes.)
  size_t DoPending(TargetId id, Target& t, size_t budget) {
    size_t done = 0;
    while (done < budget) {
      if (t.purge_pending) {
        done += PurgeStep(id, t, budget - done);
      } else if (t.sweep != nullptr) {
        done += SweepStep(id, t, budget - done);
      } else if (!erase_backlog.empty()) {
        done += DrainEraseBacklog(budget - done);
      } else {
        break;
      }
    }
    MaybeShrink();
    return done;
  }
  void FinishPending(TargetId id, Target& t) { DoPending(id, t, SIZE_MAX); }
  bool Pending(const Target& t) const {
    return t.purge_pending || t.sweep != nullptr || !erase_backlog.empty();
  }

  // Erases entries whose row the target no longer holds (PurgeEngineMap in steps).
  size_t PurgeStep(TargetId id, Target& t, size_t budget) {
    EngineMap& map = t.engine_map;
    const size_t end = StepEnd(t.purge_cursor, map.capacity(), std::max<size_t>(budget, 1));
    size_t done = 0;
    for (; t.purge_cursor < end; ++t.purge_cursor, ++done) {
      const uint32_t e = static_cast<uint32_t>(t.purge_cursor);
      if (map.full(e) && !HoldsRow(id, map.slot(e).row())) EraseEntry(t, e);
    }
    if (t.purge_cursor >= map.capacity()) {
      t.purge_pending = false;
      t.purge_cursor = 0;
      MaybeShrink();
    }
    return std::max<size_t>(done, 1);
  }
  // Whether the target holds row i on some tier (i may be a slot erased since).
  bool HoldsRow(TargetId id, uint32_t i) const {
    return i < rows.capacity() && rows.full(i) && Get(rows.slot(i).holders, id) != 0;
  }

  void Refresh(TargetId id) {
    const Target& t = targets[id];
    const uint8_t mode = t.Bisectable() ? static_cast<uint8_t>(t.OnlyTier()) : kWalk;
    if (walk_mode[id] != mode) ++mode_generation;
    walk_mode[id] = mode;
  }

  // After `applied` more blocks of the event path: a target that lost the
  // prefix-closed flag tries to prove it again once it has applied as many blocks
  // as 4x its size (so the proof, two row reads per held block, costs at most half
  // a row read per applied block).
  // Targets above this many blocks are not rechecked (one proof would hold the
  // writer for too long); they are walked until cleared.
  static constexpr size_t kMaxRecheckBlocks = size_t{1} << 16;
  void AfterEvent(TargetId id, Target& t, bool was_closed, size_t applied) {
    if (was_closed && !t.closed) {
      t.recheck_in = 4 * t.block_count + 64;
    } else {
      MaybeRecheck(id, t, applied);
    }
    Refresh(id);
  }
  void MaybeRecheck(TargetId id, Target& t, size_t applied) {
    // (A sweep in progress rechecks at its end.)
    if (t.closed || t.has_unmapped || t.sweep != nullptr || t.block_count > kMaxRecheckBlocks) {
      return;
    }
    if (t.recheck_in > applied) {
      t.recheck_in -= applied;
      return;
    }
    Recheck(id, t);
    if (!t.closed) t.recheck_in = 4 * t.block_count + 64;
  }

  // Proves the view prefix-closed from scratch, or leaves it not closed: every held
  // block's parent (its row's) must be held by the target; the children counts are
  // recomputed. Needs every held block in the engine map exactly once.
  void Recheck(TargetId id, Target& t) {
    if (t.has_unmapped || t.engine_map.size() != t.block_count) return;
    bool ok = true;
    t.engine_map.ForEach(
        [&](uint32_t e) { ok = ok && RecheckZero(id, t.engine_map.slot(e).row()); });
    t.engine_map.ForEach(
        [&](uint32_t e) { ok = ok && RecheckCount(id, t.engine_map.slot(e).row()); });
    if (ok) t.closed = true;
  }
  // Recheck's two passes, per held block (row i): its children count back to 0; one
  // more child of its parent. False when the proof fails (not held, an orphan, a
  // parent not known, a saturated count).
  bool RecheckZero(TargetId id, uint32_t i) {
    Row& r = rows.slot(i);
    const uint32_t w = Get(r.holders, id);
    if (w == 0) return false;
    Put(r.holders, id, w & ~(kMaxChildren << 4));
    return true;
  }
  bool RecheckCount(TargetId id, uint32_t i) {
    const uint32_t parent = ParentOf(rows.slot(i));
    if (parent == kRoot) return true;
    if (!IsRow(parent)) return false;
    Row& p = rows.slot(parent);
    const uint32_t w = Get(p.holders, id);
    if (w == 0 || HolderChildren(w) == kMaxChildren) return false;
    Put(p.holders, id, w + (1u << 4));
    return true;
  }

  // Adds `tier_bit` for (id, hash) and returns its row. When `linked`, `parent` is the
  // block's parent row (kRoot: a chain root; kUnknownParent: the caller's parent has
  // no row). Sets *fresh when the target did not hold the hash on any tier before.
  // REQUIRES: room for one more row (ReserveRows).
  uint32_t AddTier(TargetId id, Target& t, BlockHash hash, uint32_t tier_bit, bool linked,
                   uint32_t parent, bool* fresh) {
    auto [i, inserted] = rows.FindOrInsert(hash);
    Row& row = rows.slot(i);
    *fresh = false;
    if (inserted) {
      row.holders = Encode(id, tier_bit);
      row.link = kUnknownParent;
    } else {
      if (row.holders == 0) --kept_rows;  // held again
      const uint32_t old = Get(row.holders, id);
      if (HolderTiers(old) & tier_bit) return i;
      if (old != 0) {
        ++t.tier_entries[std::countr_zero(tier_bit)];
        Stamp(t);
        Put(row.holders, id, old | (tier_bit << 1));
        return i;
      }
      Put(row.holders, id, Encode(id, tier_bit));
    }
    ++t.tier_entries[std::countr_zero(tier_bit)];
    ++t.block_count;
    Stamp(t);
    ++entries;
    *fresh = true;
    // The row's parent is a property of the block; an unknown one is learnt from a
    // linked insert. A row that disagrees can only be a hash collision or
    // inconsistent input: the target stops being bisected.
    if (linked && ParentOf(row) == kUnknownParent && parent != kUnknownParent) {
      row.link = (row.link & ~kParentMask) | parent;
      if (IsRow(parent)) AddChildRow(parent);
    }
    if (!t.closed) return i;
    if (!linked || ParentOf(row) != parent || parent == kUnknownParent) {
      t.closed = false;
      return i;
    }
    if (parent != kRoot) {
      // One more child of the parent held by the target; the parent must be held.
      Row& p = rows.slot(parent);
      const uint32_t w = Get(p.holders, id);
      if (w == 0 || HolderChildren(w) == kMaxChildren) {
        t.closed = false;
      } else {
        Put(p.holders, id, w + (1u << 4));
      }
    }
    return i;
  }

  // Drops `tier_mask` tiers of (id, row i). Returns (tiers dropped, tiers left); the
  // row may be erased (when nobody holds it any more and no row names it).
  std::pair<uint32_t, uint32_t> DropTiers(TargetId id, Target& t, uint32_t i, uint32_t tier_mask) {
    Row& row = rows.slot(i);
    const uint32_t old = Get(row.holders, id);
    const uint32_t old_tiers = HolderTiers(old);
    const uint32_t dropped = old_tiers & tier_mask;
    if (dropped == 0) return {0, old_tiers};
    Stamp(t);
    const uint32_t left = old_tiers & ~tier_mask;
    for (uint32_t p = 0; p < kTierCount; ++p) {
      if (dropped & (1u << p)) --t.tier_entries[p];
    }
    if (left != 0) {
      Put(row.holders, id, (old & ~(7u << 1)) | (left << 1));
      return {dropped, left};
    }
    --t.block_count;
    --entries;
    if (t.closed) {
      // The entry goes: its own children would be orphans; its parent has one
      // child fewer.
      const uint32_t parent = ParentOf(row);
      if (HolderChildren(old) > 0) {
        t.closed = false;
      } else if (IsRow(parent)) {
        Row& p = rows.slot(parent);
        const uint32_t w = Get(p.holders, id);
        if (w == 0 || HolderChildren(w) == 0) {
          t.closed = false;
        } else {
          Put(p.holders, id, w - (1u << 4));
        }
      } else if (parent != kRoot) {
        t.closed = false;
      }
    }
    Put(row.holders, id, 0);
    if (row.holders == 0) Unheld(i);
    return {dropped, left};
  }

  void Clear(TargetId id, Target& t) {
    t.closed = false;  // no children bookkeeping while everything goes
    if (t.has_unmapped) {
      for (uint32_t i = 0; i < rows.capacity(); ++i) {
        if (rows.full(i) && Get(rows.slot(i).holders, id) != 0) DropTiers(id, t, i, 7);
      }
    } else {
      t.engine_map.ForEach([&](uint32_t e) { DropTiers(id, t, t.engine_map.slot(e).row(), 7); });
    }
    t.engine_map.Clear();
    t.has_unmapped = false;
    t.aliased = false;
    t.purge_pending = false;
    t.purge_cursor = 0;
    t.sweep.reset();
    for (uint32_t& n : t.epoch_entries) n = 0;
    t.epoch_stored = 0;
    t.evicted_since_clear = false;
    assert(t.block_count == 0);
    t.block_count = 0;
    for (size_t& n : t.tier_entries) n = 0;
    Stamp(t);
    t.closed = true;  // empty: trivially prefix-closed
    Refresh(id);
    DrainEraseBacklog(SIZE_MAX);  // (a clear is O(view) anyway)
    MaybeShrink();
  }

  // Drops engine map entries whose rows the target no longer holds (after direct
  // removals), so no entry names a row that may be erased.
  void PurgeEngineMap(TargetId id, Target& t) {
    t.purge_pending = true;
    t.purge_cursor = 0;
    while (t.purge_pending) PurgeStep(id, t, SIZE_MAX);
  }

  // Inserts the chain `router` continuing `parent_hash` (0 = a root) on `tier_bit`;
  // maps engine_hashes[i] -> router[i] when `engine_hashes` is not null.
  void InsertChain(TargetId id, Target& t, BlockHash parent_hash, std::span<const BlockHash> router,
                   uint32_t tier_bit, const std::span<const BlockHash>* engine_hashes) {
    ReserveRows(router.size());  // no rebuild inside the loop: row indices stay valid
    for (BlockHash h : router) rows.Prefetch(h);
    if (engine_hashes != nullptr) {
      t.engine_map.Reserve(router.size(), nullptr);
      for (BlockHash e : *engine_hashes) t.engine_map.Prefetch(e);
    }
    uint32_t parent = kRoot;
    if (parent_hash != 0) {
      parent = rows.Find(parent_hash);
      if (parent == kNoRow) parent = kUnknownParent;
    }
    for (size_t i = 0; i < router.size(); ++i) {
      bool fresh = false;
      const uint32_t row = AddTier(id, t, router[i], tier_bit, /*linked=*/true, parent, &fresh);
      if (engine_hashes != nullptr) {
        auto [e, inserted] = t.engine_map.FindOrInsert((*engine_hashes)[i]);
        EngineEntry& entry = t.engine_map.slot(e);
        // An engine hash re-stored for another block: the old block stays held
        // without a mapping.
        if (!inserted && entry.row() != row) t.has_unmapped = true;
        if (inserted && !fresh) t.aliased = true;
        Stamp(t, e, row, inserted);
      } else if (fresh) {
        t.has_unmapped = true;
      }
      parent = row;
    }
  }

  // Prefetches the rows of the bisection's next `depth` levels below (lo, hi).
  void PrefetchMids(std::span<const BlockHash> chain, uint32_t lo, uint32_t hi, int depth) const {
    if (depth == 0 || hi - lo <= 1) return;
    const uint32_t mid = (lo + hi) / 2;
    rows.Prefetch(chain[mid]);
    PrefetchMids(chain, lo, mid, depth - 1);
    PrefetchMids(chain, mid, hi, depth - 1);
  }
  void LinearWalk(std::span<const BlockHash> chain, std::span<const TargetId> candidates,
                  std::span<MatchCounts> out) const;
  void Bisect(std::span<const BlockHash> chain, std::span<const TargetId> candidates,
              std::span<const uint32_t> positions, std::span<MatchCounts> out, TargetId max_t,
              bool all_device, bool setup_cached = false) const;
};

struct GrowthPlan::Impl {
  uint64_t generation = 0;
  bool rows_rebuilt = false;
  RowTable rows;
  std::vector<uint32_t> reclaim;  // deleted row slots to turn empty (RowTable::ReclaimSlots)
  std::vector<std::pair<TargetId, EngineMap>> maps;
};

}  // namespace infera::core
