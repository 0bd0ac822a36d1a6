#include "core/approx_cache.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace infera::core {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

std::set<BlockHash> AsSet(std::span<const BlockHash> v) { return {v.begin(), v.end()}; }

TEST(ApproxCacheTest, RecordsNewBlocksRootFirstAndRefreshesKnownOnes) {
  ApproxCache cache({.ttl_ns = 120 * kSecond, .max_blocks = 100});
  std::vector<BlockHash> removed;
  EXPECT_EQ(cache.Record(7, std::vector<BlockHash>{1, 2, 3}, 0, removed),
            (std::vector<BlockHash>{1, 2, 3}));
  // The same prefix extended: only the new tail goes into the view.
  EXPECT_EQ(cache.Record(7, std::vector<BlockHash>{1, 2, 3, 4}, kSecond, removed),
            (std::vector<BlockHash>{4}));
  EXPECT_TRUE(removed.empty());
  EXPECT_EQ(cache.BlockCount(7), 4u);
  EXPECT_EQ(cache.BlockCount(8), 0u);
}

TEST(ApproxCacheTest, BlocksExpireTtlAfterTheirLastPick) {
  ApproxCache cache({.ttl_ns = 120 * kSecond, .max_blocks = 100});
  std::vector<BlockHash> removed;
  cache.Record(1, std::vector<BlockHash>{10, 11, 12}, 0, removed);
  cache.Record(1, std::vector<BlockHash>{10, 11}, 60 * kSecond, removed);  // refresh 10, 11
  std::map<TargetId, std::set<BlockHash>> gone;
  auto collect = [&](TargetId t, std::span<const BlockHash> h) {
    gone[t].insert(h.begin(), h.end());
  };
  cache.Expire(120 * kSecond - 1, collect);
  EXPECT_TRUE(gone.empty());
  cache.Expire(120 * kSecond, collect);
  EXPECT_EQ(gone[1], (std::set<BlockHash>{12}));
  gone.clear();
  cache.Expire(180 * kSecond, collect);
  EXPECT_EQ(gone[1], (std::set<BlockHash>{10, 11}));
  EXPECT_EQ(cache.BlockCount(1), 0u);
}

TEST(ApproxCacheTest, CapacityDropsTheOldestPickLeavesFirst) {
  ApproxCache cache({.ttl_ns = 120 * kSecond, .max_blocks = 4});
  std::vector<BlockHash> removed;
  cache.Record(1, std::vector<BlockHash>{1, 2, 3}, 0, removed);
  EXPECT_EQ(cache.Record(1, std::vector<BlockHash>{20, 21}, kSecond, removed),
            (std::vector<BlockHash>{20, 21}));
  EXPECT_EQ(removed, (std::vector<BlockHash>{3}));  // the deepest block of the oldest pick
  EXPECT_EQ(cache.BlockCount(1), 4u);
}

TEST(ApproxCacheTest, AChainLongerThanTheBoundKeepsItsRoot) {
  ApproxCache cache({.ttl_ns = 120 * kSecond, .max_blocks = 3});
  std::vector<BlockHash> removed;
  cache.Record(1, std::vector<BlockHash>{100}, 0, removed);
  EXPECT_EQ(cache.Record(1, std::vector<BlockHash>{1, 2, 3, 4, 5}, kSecond, removed),
            (std::vector<BlockHash>{1, 2, 3}));
  // 100 was in the view and goes; 4 and 5 never reached it.
  EXPECT_EQ(removed, (std::vector<BlockHash>{100}));
  EXPECT_EQ(cache.BlockCount(1), 3u);
}

TEST(ApproxCacheTest, RemoveTargetForgetsItsPredictions) {
  ApproxCache cache({.ttl_ns = 120 * kSecond, .max_blocks = 10});
  std::vector<BlockHash> removed;
  cache.Record(1, std::vector<BlockHash>{1, 2}, 0, removed);
  cache.RemoveTarget(1);
  EXPECT_EQ(cache.BlockCount(1), 0u);
  EXPECT_EQ(cache.Record(1, std::vector<BlockHash>{1, 2}, 0, removed),
            (std::vector<BlockHash>{1, 2}));
}

// Against a naive model: every live block with the time of its last pick and its
// position in the eviction order (a global counter, deepest block of a pick first).
TEST(ApproxCacheTest, MatchesANaiveModelOnRandomTraffic) {
  constexpr size_t kMax = 40;
  constexpr int64_t kTtl = 50;
  ApproxCache cache({.ttl_ns = kTtl, .max_blocks = kMax});
  struct Live {
    int64_t time;
    uint64_t order;
  };
  std::map<TargetId, std::map<BlockHash, Live>> model;
  std::map<TargetId, std::set<BlockHash>> view;  // what the caller's index holds
  std::mt19937_64 rng(42);
  uint64_t counter = 0;
  int64_t now = 0;
  for (int step = 0; step < 20000; ++step) {
    now += static_cast<int64_t>(rng() % 3);
    const TargetId t = static_cast<TargetId>(rng() % 3);
    if (rng() % 10 == 0) {
      std::map<TargetId, std::set<BlockHash>> gone;
      cache.Expire(now, [&](TargetId target, std::span<const BlockHash> h) {
        gone[target].insert(h.begin(), h.end());
      });
      for (auto& [target, blocks] : model) {
        std::set<BlockHash> expect;
        for (auto it = blocks.begin(); it != blocks.end();) {
          if (now - it->second.time >= kTtl) {
            expect.insert(it->first);
            it = blocks.erase(it);
          } else {
            ++it;
          }
        }
        ASSERT_EQ(gone[target], expect) << "step " << step;
        for (BlockHash h : expect) view[target].erase(h);
      }
      continue;
    }
    // A chain from a small tree of prefixes: 1-60 blocks deep, branch per level.
    std::vector<BlockHash> chain;
    const size_t depth = 1 + rng() % 60;
    BlockHash h = 1 + rng() % 4;
    for (size_t i = 0; i < depth; ++i) {
      chain.push_back(h);
      h = h * 1000003 + 1 + rng() % 2;
    }
    std::vector<BlockHash> removed;
    std::vector<BlockHash> added = cache.Record(t, chain, now, removed);
    auto& blocks = model[t];
    std::set<BlockHash> expect_added;
    for (size_t i = chain.size(); i-- > 0;) {
      if (!blocks.count(chain[i])) expect_added.insert(chain[i]);
      blocks[chain[i]] = {now, counter++};
    }
    std::set<BlockHash> expect_removed;
    while (blocks.size() > kMax) {
      auto oldest = std::min_element(blocks.begin(), blocks.end(), [](auto& a, auto& b) {
        return a.second.order < b.second.order;
      });
      if (!expect_added.erase(oldest->first)) expect_removed.insert(oldest->first);
      blocks.erase(oldest);
    }
    ASSERT_EQ(AsSet(added), expect_added) << "step " << step;
    ASSERT_EQ(AsSet(removed), expect_removed) << "step " << step;
    for (BlockHash b : removed) ASSERT_EQ(view[t].erase(b), 1u);
    for (BlockHash b : added) ASSERT_TRUE(view[t].insert(b).second);
    ASSERT_EQ(view[t].size(), cache.BlockCount(t));
  }
}

}  // namespace
}  // namespace infera::core
