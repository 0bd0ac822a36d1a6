#include "sim/prefix_cache_bound.h"

#include <gtest/gtest.h>

namespace infera::sim {
namespace {

TEST(PrefixCacheBoundTest, InfiniteCountsConsecutivePrefixHits) {
  PrefixCacheBound b(0, 16);
  b.Add(std::vector<core::BlockHash>{1, 2, 3}, 50);
  b.Add(std::vector<core::BlockHash>{1, 2, 9}, 50);  // 2 hits
  b.Add(std::vector<core::BlockHash>{7, 2, 3}, 48);  // 0 hits: the run starts at block 0
  b.Add(std::vector<core::BlockHash>{1, 2, 3}, 48);  // all 3 held, capped to 2 blocks
  EXPECT_EQ(b.prompt_tokens(), 196u);
  EXPECT_EQ(b.hit_tokens(), 64u);
  EXPECT_DOUBLE_EQ(b.HitRate(), 64.0 / 196);
}

TEST(PrefixCacheBoundTest, LruEvictsTheLeastRecentTailFirst) {
  PrefixCacheBound b(4, 1);
  b.Add(std::vector<core::BlockHash>{1, 2}, 3);
  b.Add(std::vector<core::BlockHash>{3, 4}, 3);
  b.Add(std::vector<core::BlockHash>{5}, 2);  // evicts 2 (the tail of the LRU chain)
  b.Add(std::vector<core::BlockHash>{1, 2}, 3);
  EXPECT_EQ(b.hit_tokens(), 1u);                 // 1 still held, 2 gone
  b.Add(std::vector<core::BlockHash>{3, 4}, 3);  // 4 was evicted re-adding 2
  EXPECT_EQ(b.hit_tokens(), 2u);
}

}  // namespace
}  // namespace infera::sim
