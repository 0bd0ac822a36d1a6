#include "sim/kv_cache.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/hashing.h"
#include "sim/test_tokens.h"

namespace infera::sim {
namespace {

using core::BlockHash;
using core::TokenId;

constexpr uint64_t kSeed = 77;

using test_util::Tokens;

std::vector<BlockHash> Chain(const std::vector<TokenId>& tokens, size_t bs) {
  std::vector<BlockHash> out;
  BlockHash parent = 0;
  for (size_t i = 0; i + bs <= tokens.size(); i += bs) {
    parent = EngineHash(parent, std::span(tokens).subspan(i, bs), kSeed);
    out.push_back(parent);
  }
  return out;
}

TEST(KvCacheTest, EngineHashIsNotTheRouterHash) {
  std::vector<TokenId> t = {1, 2, 3, 4};
  EXPECT_NE(EngineHash(0, t, kSeed), core::HashChunk(0, t));
  EXPECT_EQ(EngineHash(0, t, kSeed), EngineHash(0, t, kSeed));
  EXPECT_NE(EngineHash(1, t, kSeed), EngineHash(0, t, kSeed));
}

TEST(KvCacheTest, CacheEmitsStoredWithParentAndTokens) {
  KvCache cache(8, 4);
  std::vector<TokenId> tokens = Tokens(12, 100);
  std::vector<BlockHash> hashes = Chain(tokens, 4);
  std::vector<BlockId> blocks;
  cache.Allocate(3, blocks);
  EXPECT_EQ(cache.NumFree(), 5u);
  cache.Cache(std::span(blocks).first(2), std::span(hashes).first(2), std::nullopt,
              std::span(tokens).first(8));
  cache.Cache(std::span(blocks).subspan(2), std::span(hashes).subspan(2), hashes[1],
              std::span(tokens).subspan(8));
  std::vector<KvEvent> events = cache.TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kBlockStored);
  EXPECT_FALSE(events[0].parent_hash.has_value());
  EXPECT_EQ(events[0].block_hashes, (std::vector<BlockHash>{hashes[0], hashes[1]}));
  EXPECT_EQ(events[0].token_ids, std::vector<TokenId>(tokens.begin(), tokens.begin() + 8));
  EXPECT_EQ(events[0].block_size, 4u);
  EXPECT_EQ(events[1].parent_hash, hashes[1]);
  EXPECT_EQ(events[1].block_hashes, std::vector<BlockHash>{hashes[2]});
  EXPECT_EQ(cache.CountCachedPrefix(hashes), 3u);
  EXPECT_TRUE(cache.TakeEvents().empty());
}

TEST(KvCacheTest, DuplicateHashStaysUncachedAndSplitsTheEvent) {
  KvCache cache(8, 2);
  std::vector<TokenId> tokens = Tokens(6, 1);
  std::vector<BlockHash> hashes = Chain(tokens, 2);
  std::vector<BlockId> a, b;
  cache.Allocate(1, a);
  cache.Cache(a, std::span(hashes).subspan(1, 1), hashes[0], std::span(tokens).subspan(2, 2));
  cache.TakeEvents();
  cache.Allocate(3, b);
  cache.Cache(b, hashes, std::nullopt, tokens);
  std::vector<KvEvent> events = cache.TakeEvents();
  ASSERT_EQ(events.size(), 2u);  // block 0, then block 2 with parent hashes[1]
  EXPECT_EQ(events[0].block_hashes, std::vector<BlockHash>{hashes[0]});
  EXPECT_EQ(events[1].block_hashes, std::vector<BlockHash>{hashes[2]});
  EXPECT_EQ(events[1].parent_hash, hashes[1]);
  EXPECT_EQ(cache.NumCached(), 3u);
}

TEST(KvCacheTest, EvictsLeastRecentlyReleasedFirstAndTailBlocksFirst) {
  KvCache cache(4, 1);
  std::vector<TokenId> ta = {1, 2}, tb = {3, 4};
  std::vector<BlockHash> ha = Chain(ta, 1), hb = Chain(tb, 1);
  std::vector<BlockId> a, b;
  cache.Allocate(2, a);
  cache.Cache(a, ha, std::nullopt, ta);
  cache.Allocate(2, b);
  cache.Cache(b, hb, std::nullopt, tb);
  cache.Release(a);  // a released first: a[1] then a[0] join the queue
  cache.Release(b);
  cache.TakeEvents();
  EXPECT_EQ(cache.NumFree(), 4u);
  EXPECT_EQ(cache.NumCached(), 4u);

  std::vector<BlockId> c;
  cache.Allocate(1, c);
  std::vector<KvEvent> ev = cache.TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kBlockRemoved);
  EXPECT_EQ(ev[0].block_hashes, std::vector<BlockHash>{ha[1]});  // a's tail block first
  cache.Allocate(2, c);
  ev = cache.TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].block_hashes, (std::vector<BlockHash>{ha[0], hb[1]}));
  EXPECT_EQ(cache.evictions(), 3u);
  EXPECT_EQ(cache.CountCachedPrefix(hb), 1u);
}

TEST(KvCacheTest, HitTakesBlockOutOfTheFreeQueue) {
  KvCache cache(3, 1);
  std::vector<TokenId> ta = {1, 2};
  std::vector<BlockHash> ha = Chain(ta, 1);
  std::vector<BlockId> a;
  cache.Allocate(2, a);
  cache.Cache(a, ha, std::nullopt, ta);
  cache.Release(a);
  cache.TakeEvents();
  EXPECT_EQ(cache.CountFreeAmongCached(ha, 2), 2u);
  std::vector<BlockId> hit;
  cache.AcquireCached(ha, 1, hit);  // re-use block 0: the LRU order of the rest stays
  EXPECT_EQ(hit, std::vector<BlockId>{a[0]});
  EXPECT_EQ(cache.NumFree(), 2u);
  std::vector<BlockId> fresh;
  cache.Allocate(2, fresh);  // the never-used block first, then a[1] (evicted)
  std::vector<KvEvent> ev = cache.TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].block_hashes, std::vector<BlockHash>{ha[1]});
  EXPECT_TRUE(cache.IsCached(ha[0]));
}

TEST(KvCacheTest, ClearForgetsEverything) {
  KvCache cache(2, 1);
  std::vector<TokenId> t = {9};
  std::vector<BlockHash> h = Chain(t, 1);
  std::vector<BlockId> a;
  cache.Allocate(1, a);
  cache.Cache(a, h, std::nullopt, t);
  cache.TakeEvents();
  cache.Clear();
  EXPECT_EQ(cache.NumCached(), 0u);
  std::vector<KvEvent> ev = cache.TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kAllBlocksCleared);
  cache.Release(a);
  std::vector<BlockId> b;
  cache.Allocate(2, b);
  EXPECT_TRUE(cache.TakeEvents().empty());  // nothing cached, nothing evicted
}

}  // namespace
}  // namespace infera::sim
