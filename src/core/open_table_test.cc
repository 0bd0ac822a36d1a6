#include "core/open_table.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace infera::core
