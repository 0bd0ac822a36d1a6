#include "core/open_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <unordered_map>

#include "core/clock.h"

namespace infera::core {
namespace {

struct TestSlot {
  uint64_t k;
  uint32_t value;
  uint64_t key() const { return k; }
  void set_key(uint64_t key) { k = key; }
};

// Random inserts and erases (keys from a small range, so erased keys come back and
// deleted slots are reused) against std::unordered_map: every key is found at the
// slot it was inserted in until a rebuild, and a rebuild's translation names the
// slot each key moved to.
TEST(OpenTableTest, MatchesAMapUnderChurnAndSlotsStayPutBetweenRebuilds) {
  for (uint64_t seed : {1, 2, 3}) {
    OpenTable<TestSlot> table;
    std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> model;  // key -> (slot, value)
    Random rng(seed);
    std::vector<uint32_t> old_to_new;
    size_t rebuilds = 0;
    for (uint32_t step = 0; step < 60000; ++step) {
      // Small integers first (poorly mixed keys), then the whole range.
      const uint64_t key = step < 30000 ? rng.Uniform(4000) : rng.Uniform(4000) * 0x10001 + 7;
      if (rng.Uniform(3) != 0) {
        if (table.Reserve(1, &old_to_new)) {
          ++rebuilds;
          for (auto& [k, sv] : model) {
            ASSERT_LT(sv.first, old_to_new.size());
            sv.first = old_to_new[sv.first];
            ASSERT_EQ(table.slot(sv.first).key(), k);
          }
        }
        auto [i, inserted] = table.FindOrInsert(key);
        auto it = model.find(key);
        ASSERT_EQ(inserted, it == model.end()) << step;
        if (inserted) {
          table.slot(i).value = step;
          model[key] = {i, step};
        } else {
          ASSERT_EQ(i, it->second.first) << "a slot moved without a rebuild, step " << step;
        }
      } else {
        const uint32_t i = table.Find(key);
        auto it = model.find(key);
        ASSERT_EQ(i == OpenTable<TestSlot>::kNone, it == model.end()) << step;
        if (it != model.end()) {
          ASSERT_EQ(i, it->second.first);
          ASSERT_EQ(table.slot(i).value, it->second.second);
          table.Erase(i);
          model.erase(it);
        }
      }
      ASSERT_EQ(table.size(), model.size());
    }
    EXPECT_GT(rebuilds, 5u);
    size_t full = 0;
    table.ForEach([&](uint32_t i) {
      ++full;
      EXPECT_TRUE(model.contains(table.slot(i).key()));
    });
    EXPECT_EQ(full, model.size());
    // The load stays within the documented bounds after inserts.
    EXPECT_LE(static_cast<double>(table.size()) / table.capacity(), OpenTable<TestSlot>::kMaxLoad);
  }
}

TEST(OpenTableTest, RebuildShrinksAndKeepsEveryKey) {
  OpenTable<TestSlot> table;
  for (uint64_t k = 0; k < 10000; ++k) {
    table.Reserve(1, nullptr);
    table.FindOrInsert(k);
  }
  for (uint64_t k = 100; k < 10000; ++k) table.Erase(table.Find(k));
  const size_t big = table.capacity();
  std::vector<uint32_t> old_to_new;
  table.Rebuild(table.size(), &old_to_new);
  EXPECT_LT(table.capacity(), big / 50);
  for (uint64_t k = 0; k < 10000; ++k) {
    EXPECT_EQ(table.Find(k) != OpenTable<TestSlot>::kNone, k < 100) << k;
  }
  table.Clear();
  EXPECT_EQ(table.Find(1), OpenTable<TestSlot>::kNone);
  EXPECT_EQ(table.bytes(), 0u);
}


// Churn at a fixed number of keys (each step a new key in, a random old one out):
// deleted slots use the room up again and again, and Reserve turns the ones no probe
// needs empty in place instead of rebuilding at the same capacity. After the fill no
// slot moves (Reserve never reports a rebuild), the capacity stays, and every key is
// found at the slot it was inserted in.
TEST(OpenTableTest, ChurnAtAFixedSizeReclaimsDeletedSlotsInPlace) {
  OpenTable<TestSlot> table;
  std::vector<uint64_t> live;
  std::unordered_map<uint64_t, uint32_t> slot_of;
  Random rng(9);
  std::vector<uint32_t> old_to_new;
  auto insert = [&] {
    const uint64_t key = rng.Uniform(1ull << 62) * 2 + 1;  // distinct in practice
    table.FindOrInsert(key);
    live.push_back(key);
    slot_of[key] = table.Find(key);
  };
  for (int i = 0; i < 20000; ++i) {
    if (table.Reserve(1, &old_to_new)) {
      for (auto& [k, slot] : slot_of) slot = old_to_new[slot];
    }
    insert();
  }
  // Start the churn at the rebuild load (0.7), whatever load the fill ended at.
  table.Rebuild(table.size(), &old_to_new);
  for (auto& [k, slot] : slot_of) slot = old_to_new[slot];
  const size_t cap = table.capacity();
  size_t reclaims = 0;
  for (int step = 0; step < 200000; ++step) {
    const size_t j = rng.Uniform(live.size());
    table.Erase(table.Find(live[j]));
    slot_of.erase(live[j]);
    live[j] = live.back();
    live.pop_back();
    const size_t room = table.growth_left();
    ASSERT_FALSE(table.Reserve(1, &old_to_new)) << "a same-capacity rebuild, step " << step;
    if (table.growth_left() > room) ++reclaims;
    insert();
    if (step % 20000 == 0) {
      for (const auto& [k, slot] : slot_of) ASSERT_EQ(table.Find(k), slot) << step;
    }
  }
  EXPECT_EQ(table.capacity(), cap);
  EXPECT_GT(reclaims, 3u);
  EXPECT_EQ(table.size(), live.size());
  for (const auto& [k, slot] : slot_of) ASSERT_EQ(table.Find(k), slot);
  // A key never inserted is not found (no probe loops for lack of an empty slot).
  EXPECT_EQ(table.Find(2), OpenTable<TestSlot>::kNone);
}

// ReclaimableDeleted keeps the deleted slots a displaced key's probe passes over: with
// every key sharing one home window, erasing the first 16 leaves the 17th findable.
TEST(OpenTableTest, ReclaimKeepsTheDeletedSlotsAProbeNeeds) {
  OpenTable<TestSlot> table;
  table.Reserve(200, nullptr);
  // Keys whose home is the same slot: found by search (Home is private).
  std::vector<uint64_t> same;
  {
    OpenTable<TestSlot> probe;
    probe.Reserve(200, nullptr);
    ASSERT_EQ(probe.capacity(), table.capacity());
    const uint32_t target = probe.FindOrInsert(1).first;
    same.push_back(1);
    for (uint64_t k = 2; same.size() < 40 && k < 10000000; ++k) {
      // A key whose slot in an otherwise empty table is `target` has that home.
      OpenTable<TestSlot> one;
      one.Reserve(200, nullptr);
      if (one.FindOrInsert(k).first == target) same.push_back(k);
    }
  }
  ASSERT_EQ(same.size(), 40u);
  for (const uint64_t k : same) table.FindOrInsert(k);
  // Keys 0..15 fill the home window, 16..31 the next, 32..39 the third. Erased (all
  // deleted, not empty): the first window's (keys 16..39 probe past it) and the third's
  // (no key probes past it: those 8 are reclaimable).
  std::vector<uint32_t> tail;
  for (size_t i = 0; i < same.size(); ++i) {
    if (i >= 16 && i < 32) continue;
    const uint32_t slot = table.Find(same[i]);
    if (i >= 32) tail.push_back(slot);
    table.Erase(slot);
  }
  std::vector<uint32_t> slots = table.ReclaimableDeleted();
  std::sort(tail.begin(), tail.end());
  EXPECT_EQ(slots, tail);
  const size_t room = table.growth_left();
  table.ReclaimSlots(slots);
  EXPECT_EQ(table.growth_left(), room + 8);
  for (size_t i = 0; i < same.size(); ++i) {
    EXPECT_EQ(table.Find(same[i]) != OpenTable<TestSlot>::kNone, i >= 16 && i < 32) << i;
  }
}

}  // namespace
}  // namespace infera::core
