// OpenTable: the KV index's open-addressing hash table (doc/index.md "Tables").
//
// A flat array of fixed-size slots keyed by a 64-bit key, with one control byte per
// slot (empty / deleted / 7 bits of the key's hash), probed 16 slots at a time from
// the key's home slot (SSE2 compares of 16 control bytes). Unlike absl's tables:
//  * slots never move except in Rebuild(), so a slot index names an entry for as long
//    as it lives: the index stores 32-bit slot indices (a row's parent, a target's
//    engine map) instead of 64-bit hashes or pointers;
//  * the capacity is any size >= 16 (home slot = multiply-shift range reduction), so
//    a rebuild can size the table to a load between kMinLoad and kMaxLoad instead of
//    doubling (absl: 7/16 to 7/8);
//  * with Huge = true, a slot or control array of 4 MiB or more is mapped by the table
//    itself (mmap, 2 MiB-aligned, unmapped when freed) and marked for transparent
//    huge pages (a probe of a big table is then one cache miss, not a miss plus a
//    page walk).
// Erase turns a slot empty when no probe window can have seen it full (absl's rule),
// else deleted; Rebuild() drops deleted slots, ReclaimDeleted() turns the deleted
// slots no key's probe needs empty in place (a same-capacity rebuild avoided).
//
// Slot: a trivially copyable struct with `uint64_t key() const` and
// `void set_key(uint64_t)`.
//
// Thread-safety: none. Const calls may run concurrently with each other.
//
// Example:
//   OpenTable<MySlot> t;
//   t.Reserve(1, nullptr);                 // room for one more key (may rebuild)
//   auto [i, inserted] = t.FindOrInsert(key);
//   t.slot(i).value = 7;
//   t.Erase(t.Find(key));
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace infera::core {

// Bytes of the huge arrays every OpenTable has mapped itself (outside malloc, so
// mallinfo2 does not see them): heap accounting in tests and benchmarks.
inline std::atomic<size_t> open_table_mapped_bytes{0};

template <typename Slot, bool Huge = false>
class OpenTable {
  static_assert(std::is_trivially_copyable_v<Slot>);

 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  // Load bounds: inserts rebuild at kMaxLoad (live + deleted slots); a rebuild sizes
  // the table to kMinLoad.
  static constexpr double kMaxLoad = 7.0 / 8;
  static constexpr double kMinLoad = 0.7;
  // At most this many slots (slot indices are 27 bits wide in the index's rows).
  static constexpr size_t kMaxCapacity = (size_t{1} << 27) - 2;

  OpenTable() = default;
  OpenTable(const OpenTable&) = delete;
  OpenTable& operator=(const OpenTable&) = delete;
  OpenTable(OpenTable&& o) noexcept { Swap(o); }
  OpenTable& operator=(OpenTable&& o) noexcept {
    if (this != &o) {
      OpenTable().Swap(*this);
      Swap(o);
    }
    return *this;
  }
  ~OpenTable() { Free(); }

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  // Bytes of the arrays (control bytes and slots).
  size_t bytes() const { return capacity_ ? capacity_ * sizeof(Slot) + capacity_ + kGroup : 0; }

  Slot& slot(uint32_t i) { return slots_[i]; }
  const Slot& slot(uint32_t i) const { return slots_[i]; }
  bool full(uint32_t i) const { return ctrl_[i] >= 0; }

  // The slot of `key`, or kNone.
  uint32_t Find(uint64_t key) const {
    if (capacity_ == 0) return kNone;
    const uint64_t h = Mix(key);
    const int8_t tag = static_cast<int8_t>(h & 0x7f);
    uint32_t pos = Home(h);
    for (;;) {
      const Group g(ctrl_ + pos);
      for (uint32_t m = g.Match(tag); m; m &= m - 1) {
        const uint32_t i = Wrap(pos + std::countr_zero(m));
        if (slots_[i].key() == key) return i;
      }
      if (g.MatchEmpty()) return kNone;
      pos = Wrap(pos + kGroup);
    }
  }

  // Brings the key's first two windows of control bytes and the two cache lines of
  // slots from its home towards the cache (at 7/8 load a key sits ~5 slots past its home on
  // average, an insert lands in the first free slot).
  // always_inline: GCC 12 (-O1 and up) found the out-of-line function free of side
  // effects (ipa-pure-const: prefetches only) and deleted every call to it, so no
  // Prefetch() of the index prefetched anything until session 13 (kv_snapshot_bench).
  __attribute__((always_inline)) void Prefetch(uint64_t key) const {
    if (capacity_ == 0) return;
    const uint32_t pos = Home(Mix(key));
    __builtin_prefetch(ctrl_ + pos);
    // The first two windows' control bytes (pos .. pos + 31) may end on the next
    // line: a miss probes the second window whenever the first has no empty slot,
    // which at 0.7-7/8 load is common. (Clamped to the array: cap + 16 bytes.)
    __builtin_prefetch(ctrl_ + std::min<size_t>(pos + 2 * kGroup - 1, capacity_ + kGroup - 1));
    const char* line = reinterpret_cast<const char*>(slots_ + pos);
    __builtin_prefetch(line);
    __builtin_prefetch(line + 64);
  }

  // The slot of `key`, inserted (key set, the rest zeroed) when absent.
  // REQUIRES: Reserve() made room for the insert. Never moves a slot.
  std::pair<uint32_t, bool> FindOrInsert(uint64_t key) {
    const uint64_t h = Mix(key);
    const int8_t tag = static_cast<int8_t>(h & 0x7f);
    uint32_t pos = Home(h);
    uint32_t free_slot = kNone;
    for (;;) {
      const Group g(ctrl_ + pos);
      for (uint32_t m = g.Match(tag); m; m &= m - 1) {
        const uint32_t i = Wrap(pos + std::countr_zero(m));
        if (slots_[i].key() == key) return {i, false};
      }
      if (free_slot == kNone) {
        if (const uint32_t m = g.MatchEmptyOrDeleted()) free_slot = Wrap(pos + std::countr_zero(m));
      }
      if (g.MatchEmpty()) break;
      pos = Wrap(pos + kGroup);
    }
    if (ctrl_[free_slot] == kEmpty) --growth_left_;
    SetCtrl(free_slot, tag);
    ++size_;
    std::memset(static_cast<void*>(&slots_[free_slot]), 0, sizeof(Slot));
    slots_[free_slot].set_key(key);
    return {free_slot, true};
  }

  // REQUIRES: slot i is full.
  void Erase(uint32_t i) {
    --size_;
    const uint32_t before = Group(ctrl_ + Wrap(i + capacity_ - kGroup)).MatchEmpty();
    const uint32_t after = Group(ctrl_ + i).MatchEmpty();
    // No window of 16 slots around i was ever full: nothing probed past it.
    const bool never_full =
        before && after &&
        static_cast<uint32_t>(std::countr_zero(after) + std::countl_zero(before << 16)) < kGroup;
    SetCtrl(i, never_full ? kEmpty : kDeleted);
    if (never_full) ++growth_left_;
  }

  // Makes room for `more` inserts. When that takes a rebuild, slots move: then
  // `old_to_new` (when not null) gets, per old slot index, the new one (kNone for
  // slots that were not full) and true is returned. When deleted slots alone used the
  // room up (a rebuild at the same capacity), the ones no probe needs turn empty in
  // place first (ReclaimDeleted): no slot moves, and false is returned if that made
  // enough room.
  bool Reserve(size_t more, std::vector<uint32_t>* old_to_new) {
    if (!NeedsRebuild(more)) return false;
    if (DeletedUsedTheRoom(more) && ReclaimDeleted(more)) return false;
    RebuildTo(ReserveCapacity(more), old_to_new);
    return true;
  }
  // Whether the keys and `more` fit at 3/4 load, so deleted slots (not keys) used the
  // room up: reclaiming them is tried before a rebuild. (Not "the rebuild keeps the
  // capacity": under churn at a steady size a rebuild grows the table by a few slots
  // each time, CapacityFor(size + more), and would never count as same-capacity.)
  bool DeletedUsedTheRoom(size_t more) const {
    return size_ + more <= capacity_ / 4 * 3;
  }
  // Whether Reserve(more) would rebuild, and the capacity it would rebuild to.
  bool NeedsRebuild(size_t more) const { return more > growth_left_; }
  size_t growth_left() const { return growth_left_; }

  // The deleted slots no live key's probe passes over, ascending: each can turn empty
  // without moving anything. A key found in its probe's window j (16 slots each, from
  // its home slot) needs windows 0..j-1 free of empty slots; nothing else does (a
  // probe for an absent key may stop earlier: it finds nothing either way). O(capacity),
  // const: a writer can compute it under a shared lock and ReclaimSlots after.
  std::vector<uint32_t> ReclaimableDeleted() const {
    std::vector<uint32_t> out;
    if (capacity_ == 0 || size_ + 1 >= capacity_) return out;
    std::vector<uint64_t> needed((capacity_ + 63) / 64, 0);
    size_t deleted = 0;
    for (uint32_t i = 0; i < capacity_; ++i) {
      if (i + 64 < capacity_) __builtin_prefetch(&slots_[i + 64]);
      const int8_t c = ctrl_[i];
      if (c == kDeleted) ++deleted;
      if (c < 0) continue;
      const uint32_t home = Home(Mix(slots_[i].key()));
      const uint32_t d = i >= home ? i - home : i + capacity_ - home;
      const uint32_t before = d / kGroup * kGroup;  // slots of the windows before its own
      for (uint32_t k = 0, j = home; k < before; ++k, j = j + 1 == capacity_ ? 0 : j + 1) {
        needed[j >> 6] |= uint64_t{1} << (j & 63);
      }
    }
    if (deleted == 0) return out;
    out.reserve(deleted);
    for (uint32_t i = 0; i < capacity_; ++i) {
      if (ctrl_[i] == kDeleted && !(needed[i >> 6] >> (i & 63) & 1)) out.push_back(i);
    }
    return out;
  }
  // Turns `slots` (from ReclaimableDeleted, no write since) empty.
  void ReclaimSlots(const std::vector<uint32_t>& slots) {
    for (const uint32_t i : slots) SetCtrl(i, kEmpty);
    growth_left_ += slots.size();
  }
  // Whether turning ReclaimableDeleted() empty leaves room for `more` inserts and
  // for 1/32 of the table (less would scan again soon: then rebuild).
  bool ReclaimWorthIt(size_t reclaimable, size_t more) const {
    return growth_left_ + reclaimable >= std::max<size_t>(more, capacity_ / 32);
  }
  // ReclaimableDeleted + ReclaimSlots when ReclaimWorthIt; returns whether it did.
  bool ReclaimDeleted(size_t more) {
    const std::vector<uint32_t> slots = ReclaimableDeleted();
    if (!ReclaimWorthIt(slots.size(), more)) return false;
    ReclaimSlots(slots);
    return true;
  }
  size_t ReserveCapacity(size_t more) const {
    // Deleted slots used the room up while the keys still fit: rebuild at the same
    // capacity (a shrink would be followed by regrowth under churn) unless the table
    // is below 1/8 full.
    const size_t n = size_ + more;
    size_t cap = CapacityFor(n);
    if (cap < capacity_ && n >= capacity_ / 8) cap = capacity_;
    return cap;
  }

  // Sizes the table for `n` keys (at least size()) at kMinLoad and reinserts every
  // key (the deleted slots go). See Reserve for `old_to_new`.
  void Rebuild(size_t n, std::vector<uint32_t>* old_to_new) {
    RebuildTo(CapacityFor(std::max(n, size_)), old_to_new);
  }
  void RebuildTo(size_t cap, std::vector<uint32_t>* old_to_new) {
    OpenTable fresh = Rebuilt(cap, old_to_new);
    Swap(fresh);
  }
  // What RebuildTo(cap) makes, as a new table; this one is left as it is (so a
  // writer can build it while readers still read this one).
  OpenTable Rebuilt(size_t cap, std::vector<uint32_t>* old_to_new) const {
    if (cap > kMaxCapacity) std::abort();  // ~117M keys: far past any fleet
    OpenTable fresh;
    fresh.Allocate(cap);
    if (old_to_new) old_to_new->assign(capacity_, kNone);
    for (uint32_t i = 0; i < capacity_; ++i) {
      if (!full(i)) continue;
      const uint32_t j = fresh.InsertNew(slots_[i]);
      if (old_to_new) (*old_to_new)[i] = j;
    }
    return fresh;
  }
  // A copy with every key in the same slot.
  OpenTable Clone() const {
    OpenTable copy;
    if (capacity_ == 0) return copy;
    copy.Allocate(capacity_);
    std::memcpy(copy.ctrl_, ctrl_, capacity_ + kGroup);
    std::memcpy(static_cast<void*>(copy.slots_), slots_, capacity_ * sizeof(Slot));
    copy.size_ = size_;
    copy.growth_left_ = growth_left_;
    return copy;
  }

  // Frees everything.
  void Clear() { OpenTable().Swap(*this); }

  // Calls f(index) for every full slot.
  template <typename F>
  void ForEach(F&& f) const {
    for (uint32_t i = 0; i < capacity_; ++i) {
      if (full(i)) f(i);
    }
  }

 private:
  static constexpr uint32_t kGroup = 16;
  static size_t CapacityFor(size_t n) {
    return std::max<size_t>(kGroup, static_cast<size_t>(static_cast<double>(n) / kMinLoad) + 1);
  }
  static constexpr int8_t kEmpty = -128;
  static constexpr int8_t kDeleted = -2;
  static constexpr size_t kHugePage = size_t{2} << 20;

  // 16 control bytes from p (SSE2 when available).
  struct Group {
#if defined(__SSE2__)
    __m128i c;
    explicit Group(const int8_t* p) : c(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))) {}
    uint32_t Match(int8_t tag) const {
      return static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_set1_epi8(tag), c)));
    }
    uint32_t MatchEmpty() const { return Match(kEmpty); }
    uint32_t MatchEmptyOrDeleted() const {
      return static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpgt_epi8(_mm_set1_epi8(-1), c)));
    }
#else
    int8_t c[kGroup];
    explicit Group(const int8_t* p) { std::memcpy(c, p, kGroup); }
    uint32_t Match(int8_t tag) const {
      uint32_t m = 0;
      for (uint32_t k = 0; k < kGroup; ++k) m |= uint32_t{c[k] == tag} << k;
      return m;
    }
    uint32_t MatchEmpty() const { return Match(kEmpty); }
    uint32_t MatchEmptyOrDeleted() const {
      uint32_t m = 0;
      for (uint32_t k = 0; k < kGroup; ++k) m |= uint32_t{c[k] < -1} << k;
      return m;
    }
#endif
  };

  // Keys may be poorly mixed (engine hashes of tests are small integers).
  static uint64_t Mix(uint64_t key) {
    const unsigned __int128 p = static_cast<unsigned __int128>(key) * 0x9E3779B97F4A7C15ull;
    return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
  }
  uint32_t Home(uint64_t h) const {
    return static_cast<uint32_t>((static_cast<unsigned __int128>(h >> 7) * capacity_) >> 57);
  }
  uint32_t Wrap(uint32_t i) const { return i >= capacity_ ? i - capacity_ : i; }
  void SetCtrl(uint32_t i, int8_t c) {
    ctrl_[i] = c;
    if (i < kGroup) ctrl_[capacity_ + i] = c;  // the clone read by windows that wrap
  }
  // Inserts a key known absent into a table without deleted slots.
  uint32_t InsertNew(const Slot& s) {
    const uint64_t h = Mix(s.key());
    uint32_t pos = Home(h);
    for (;;) {
      if (const uint32_t m = Group(ctrl_ + pos).MatchEmpty()) {
        const uint32_t i = Wrap(pos + std::countr_zero(m));
        SetCtrl(i, static_cast<int8_t>(h & 0x7f));
        slots_[i] = s;
        ++size_;
        --growth_left_;
        return i;
      }
      pos = Wrap(pos + kGroup);
    }
  }

  // True when Alloc maps `bytes` itself (huge pages) instead of calling malloc.
  static bool Mapped(size_t bytes, bool huge) { return huge && bytes >= 2 * kHugePage; }
  static size_t MappedBytes(size_t bytes) {
    return (bytes + kHugePage - 1) / kHugePage * kHugePage;
  }
  static void* Alloc(size_t bytes, bool huge) {
    if (!Mapped(bytes, huge)) {
      void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      if (p == nullptr) throw std::bad_alloc();
      return p;
    }
    // Mapped here, not taken from malloc: munmap in Release gives the pages back to
    // the OS when a rebuild frees the old array. From malloc, the freed huge range
    // stayed with the allocator, still marked MADV_HUGEPAGE, and small objects it
    // later placed there faulted in 2 MiB pages each (doc/soak.md: the router's RSS
    // swung by the size of a row table under churn).
    bytes = MappedBytes(bytes);
    void* raw = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    // Keep the 2 MiB-aligned `bytes` inside the mapping; unmap the ends.
    const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (begin + kHugePage - 1) / kHugePage * kHugePage;
    if (start > begin) munmap(raw, start - begin);
    const uintptr_t tail = begin + bytes + kHugePage - (start + bytes);
    if (tail > 0) munmap(reinterpret_cast<void*>(start + bytes), tail);
    void* p = reinterpret_cast<void*>(start);
    madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without THP, ordinary pages
    open_table_mapped_bytes.fetch_add(bytes, std::memory_order_relaxed);
    return p;
  }
  static void Release(void* p, size_t bytes, bool huge) {
    if (p == nullptr) return;
    if (Mapped(bytes, huge)) {
      munmap(p, MappedBytes(bytes));
      open_table_mapped_bytes.fetch_sub(MappedBytes(bytes), std::memory_order_relaxed);
    } else {
      std::free(p);
    }
  }
  void Allocate(size_t cap) {
    capacity_ = static_cast<uint32_t>(cap);
    // The control bytes are probed first by every lookup: huge pages for them too
    // (a 10M-slot table has 10 MB of them; with 4 KiB pages each probe would add a
    // TLB miss before the slot line).
    ctrl_ = static_cast<int8_t*>(Alloc(cap + kGroup, Huge));
    std::memset(ctrl_, kEmpty, cap + kGroup);
    slots_ = static_cast<Slot*>(Alloc(cap * sizeof(Slot), Huge));
    size_ = 0;
    growth_left_ = static_cast<size_t>(static_cast<double>(cap) * kMaxLoad);
    growth_left_ = std::min<size_t>(growth_left_, cap - 1);  // one slot always empty
  }
  void Free() {
    if (capacity_ != 0) {
      Release(ctrl_, capacity_ + kGroup, Huge);
      Release(slots_, capacity_ * sizeof(Slot), Huge);
    }
    ctrl_ = nullptr;
    slots_ = nullptr;
    capacity_ = 0;
    size_ = 0;
    growth_left_ = 0;
  }
  void Swap(OpenTable& o) noexcept {
    std::swap(ctrl_, o.ctrl_);
    std::swap(slots_, o.slots_);
    std::swap(capacity_, o.capacity_);
    std::swap(size_, o.size_);
    std::swap(growth_left_, o.growth_left_);
  }

  int8_t* ctrl_ = nullptr;
  Slot* slots_ = nullptr;
  uint32_t capacity_ = 0;
  size_t size_ = 0;
  size_t growth_left_ = 0;  // inserts into empty slots before a rebuild
};

}  // namespace infera::core
