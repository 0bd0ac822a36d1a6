#include "core/kv_index.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/clock.h"
#include "core/hashing.h"

namespace infera::core {
namespace {

std::vector<TokenId> Tokens(size_t n, TokenId start) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Built with += : "t" + std::to_string(i) trips GCC 12's -Wrestrict false positive.
std::string Name(int i) {
  std::string name = "t";
  name += std::to_string(i);
  return name;
}

MatchCounts MatchOne(const KvIndex& index, std::span<const BlockHash> chain, TargetId t) {
  std::vector<MatchCounts> out(1);
  const TargetId c[] = {t};
  index.FindMatches(chain, c, out);
  return out[0];
}

TEST(KvIndexTest, TargetsGetDenseReusedIds) {
  KvIndex index;
  const TargetId a = index.AddTarget({"a:1", 0}, 16);
  const TargetId b = index.AddTarget({"a:1", 1}, 16);
  EXPECT_NE(a, b);
  EXPECT_EQ(index.AddTarget({"a:1", 0}, 32), a);  // idempotent, block size updated
  EXPECT_EQ(index.BlockSize(a), 32u);
  EXPECT_EQ(index.FindTarget({"a:1", 1}), b);
  EXPECT_EQ(index.Key(b).ToString(), "a:1#1");
  index.RemoveTarget(a);
  EXPECT_FALSE(index.FindTarget({"a:1", 0}).has_value());
  EXPECT_EQ(index.Targets(), std::vector<TargetId>{b});
  EXPECT_EQ(index.AddTarget({"c:1", 0}, 16), a);  // id reused
}

TEST(KvIndexTest, StoredChainMatchesConsecutivePrefix) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, 4);
  const auto tokens = Tokens(16, 1);  // 4 blocks
  const std::vector<BlockHash> engine = {101, 102, 103, 104};
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, engine, tokens, Tier::kDevice), StoreOutcome::kOk);
  EXPECT_EQ(index.BlockCount(w), 4u);
  EXPECT_EQ(index.EntryCount(), 4u);
  // The router hashes are the spec's chained XXH3 of the tokens.
  const auto chain = HashChain(tokens, 4);
  for (BlockHash h : chain) EXPECT_TRUE(index.Holds(w, h, Tier::kDevice));

  // A request extending the prompt hits the 4 stored blocks, then misses.
  auto longer = Tokens(24, 1);
  EXPECT_EQ(MatchOne(index, HashChain(longer, 4), w).device_hits, 4u);
  // Diverging at block 2: only the first two count.
  longer[9] = 999;
  EXPECT_EQ(MatchOne(index, HashChain(longer, 4), w).total(), 2u);
  // Diverging at block 0: nothing counts even though later blocks may exist.
  longer = Tokens(16, 1);
  longer[0] = 7;
  EXPECT_EQ(MatchOne(index, HashChain(longer, 4), w).total(), 0u);
}

TEST(KvIndexTest, GapInTheMiddleStopsTheRun) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, 4);
  const auto chain = HashChain(Tokens(40, 1), 4);  // 10 blocks
  std::vector<BlockHash> held(chain.begin(), chain.end());
  held.erase(held.begin() + 3);  // hole at block 3
  index.InsertRouterHashes(w, held, Tier::kDevice);
  EXPECT_EQ(MatchOne(index, chain, w).total(), 3u);
}

TEST(KvIndexTest, ParentIsResolvedThroughTheEngineMap) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, 4);
  const auto tokens = Tokens(12, 1);
  const std::span<const TokenId> all(tokens);
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, std::vector<BlockHash>{11}, all.subspan(0, 4),
                              Tier::kDevice),
            StoreOutcome::kOk);
  ASSERT_EQ(index.ApplyStored(w, BlockHash{11}, std::vector<BlockHash>{12, 13}, all.subspan(4, 8),
                              Tier::kDevice),
            StoreOutcome::kOk);
  EXPECT_EQ(MatchOne(index, HashChain(tokens, 4), w).total(), 3u);
}

TEST(KvIndexTest, UnknownParentAppliesNothing) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, 4);
  const auto tokens = Tokens(8, 1);
  EXPECT_EQ(
      index.ApplyStored(w, BlockHash{999}, std::vector<BlockHash>{1, 2}, tokens, Tier::kDevice),
      StoreOutcome::kUnknownParent);
  EXPECT_EQ(index.BlockCount(w), 0u);
  EXPECT_EQ(index.EntryCount(), 0u);
  EXPECT_EQ(index.ApplyStored(7, std::nullopt, std::vector<BlockHash>{1, 2}, tokens, Tier::kDevice),
            StoreOutcome::kUnknownTarget);
}

TEST(KvIndexTest, CountMismatchInsertsWithoutMapping) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, 4);
  const auto tokens = Tokens(16, 1);  // 4 router blocks, engine reported 2 (size 8)
  EXPECT_EQ(index.ApplyStored(w, std::nullopt, std::vector<BlockHash>{1, 2}, tokens, Tier::kDevice),
            StoreOutcome::kCountMismatch);
  EXPECT_EQ(index.BlockCount(w), 4u);
  EXPECT_EQ(index.MappedEngineHashCount(w), 0u);
  // Removal by those engine hashes is reported as unknown, not guessed.
  const RemoveResult r = index.ApplyRemoved(w, std::vector<BlockHash>{1, 2}, Tier::kDevice);
  EXPECT_EQ(r.removed, 0u);
  EXPECT_EQ(r.unknown, 2u);
  EXPECT_EQ(index.BlockCount(w), 4u);
  // Clearing still finds them.
  index.ApplyCleared(w);
  EXPECT_EQ(index.BlockCount(w), 0u);
  EXPECT_EQ(index.DistinctHashCount(), 0u);
}

TEST(KvIndexTest, RemovedDropsBlocksAndReportsUnknownEngineHashes) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, 4);
  const auto tokens = Tokens(16, 1);
  ASSERT_EQ(
      index.ApplyStored(w, std::nullopt, std::vector<BlockHash>{1, 2, 3, 4}, tokens, Tier::kDevice),
      StoreOutcome::kOk);
  const RemoveResult r = index.ApplyRemoved(w, std::vector<BlockHash>{3, 4, 77}, Tier::kDevice);
  EXPECT_EQ(r.removed, 2u);
  EXPECT_EQ(r.unknown, 1u);
  EXPECT_EQ(index.BlockCount(w), 2u);
  EXPECT_EQ(index.MappedEngineHashCount(w), 2u);
  EXPECT_EQ(MatchOne(index, HashChain(tokens, 4), w).total(), 2u);
  // Removing again: the mapping went with the block.
  EXPECT_EQ(index.ApplyRemoved(w, std::vector<BlockHash>{3}, Tier::kDevice).unknown, 1u);
}

TEST(KvIndexTest, TiersAreTrackedSeparatelyAndCountedOnTheBestTier) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, 4);
  const auto tokens = Tokens(16, 1);
  const std::vector<BlockHash> engine = {1, 2, 3, 4};
  const auto chain = HashChain(tokens, 4);
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, engine, tokens, Tier::kDevice), StoreOutcome::kOk);
  // Offloaded copies of all 4 on host, blocks 2..3 also on disk.
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, engine, tokens, Tier::kHost), StoreOutcome::kOk);
  index.InsertRouterHashes(w, std::span(chain).subspan(2), Tier::kDisk);
  EXPECT_EQ(index.BlockCount(w), 4u);  // distinct hashes, not tier entries
  // Evict blocks 1..3 from device: they remain on host.
  EXPECT_EQ(index.ApplyRemoved(w, std::vector<BlockHash>{2, 3, 4}, Tier::kDevice).removed, 3u);
  MatchCounts m = MatchOne(index, chain, w);
  EXPECT_EQ(m.device_hits, 1u);
  EXPECT_EQ(m.host_hits, 3u);
  EXPECT_EQ(m.disk_hits, 0u);
  // Evict host copies of 2..3: those are on disk only now.
  EXPECT_EQ(index.ApplyRemoved(w, std::vector<BlockHash>{3, 4}, Tier::kHost).removed, 2u);
  m = MatchOne(index, chain, w);
  EXPECT_EQ(m.device_hits, 1u);
  EXPECT_EQ(m.host_hits, 1u);
  EXPECT_EQ(m.disk_hits, 2u);
  // The mapping of engine hash 2 survives its device removal (still on host).
  EXPECT_EQ(index.ApplyRemoved(w, std::vector<BlockHash>{2}, Tier::kHost).removed, 1u);
  EXPECT_EQ(MatchOne(index, chain, w).total(), 1u);
}

TEST(KvIndexTest, ClearedEmptiesTargetOnly) {
  KvIndex index;
  const TargetId a = index.AddTarget({"a", 0}, 4);
  const TargetId b = index.AddTarget({"b", 0}, 4);
  const auto tokens = Tokens(16, 1);
  index.ApplyStored(a, std::nullopt, std::vector<BlockHash>{1, 2, 3, 4}, tokens, Tier::kDevice);
  index.ApplyStored(b, std::nullopt, std::vector<BlockHash>{5, 6, 7, 8}, tokens, Tier::kDevice);
  index.ApplyCleared(a);
  EXPECT_EQ(index.BlockCount(a), 0u);
  EXPECT_EQ(index.MappedEngineHashCount(a), 0u);
  EXPECT_EQ(index.BlockCount(b), 4u);
  const auto chain = HashChain(tokens, 4);
  std::vector<MatchCounts> out(2);
  const TargetId cands[] = {a, b};
  index.FindMatches(chain, cands, out);
  EXPECT_EQ(out[0].total(), 0u);
  EXPECT_EQ(out[1].total(), 4u);
}

size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;  // small chunks + mmapped large ones
}

TEST(KvIndexTest, RemoveTargetFreesItsEntriesAndMemory) {
  KvIndex index;
  const TargetId keep = index.AddTarget({"keep", 0}, 4);
  index.InsertRouterHashes(keep, std::vector<BlockHash>{1, 2, 3}, Tier::kDevice);
  const size_t before = HeapInUse();
  const TargetId gone = index.AddTarget({"gone", 0}, 4);
  Random rng(7);
  std::vector<BlockHash> engine(64);
  std::vector<TokenId> tokens(64 * 4);
  for (int batch = 0; batch < 500; ++batch) {
    for (auto& e : engine) e = rng.Next();
    for (auto& t : tokens) t = static_cast<TokenId>(rng.Next());
    ASSERT_EQ(index.ApplyStored(gone, std::nullopt, engine, tokens, Tier::kDevice),
              StoreOutcome::kOk);
  }
  // Share some of keep's blocks too, so removal must leave those rows in place.
  index.InsertRouterHashes(gone, std::vector<BlockHash>{1, 2}, Tier::kHost);
  EXPECT_EQ(index.BlockCount(gone), 500u * 64 + 2);
  const size_t grown = HeapInUse();
  index.RemoveTarget(gone);
  EXPECT_EQ(index.EntryCount(), 3u);
  EXPECT_EQ(index.DistinctHashCount(), 3u);
  EXPECT_EQ(index.BlockCount(keep), 3u);
  EXPECT_TRUE(index.Holds(keep, 1, Tier::kDevice));
  // Everything the target owned is returned, and the emptied global table shrinks.
  // (mallinfo2 reads 0 under sanitizers' allocators; the counts above still apply.)
  if (before > 0) {
    const size_t after = HeapInUse();
    EXPECT_LT(after, before + (grown - before) / 2)
        << "before " << before << " grown " << grown << " after " << after;
  }
  // A new target on the reused id starts empty.
  const TargetId again = index.AddTarget({"again", 0}, 4);
  EXPECT_EQ(again, gone);
  EXPECT_EQ(index.BlockCount(again), 0u);
  EXPECT_FALSE(index.Holds(again, 1, Tier::kHost));
}

// Differential test against a naive model (per-target map hash -> tier mask), with
// holder counts crossing the inline (≤2), sparse and dense (>32) forms, and candidate
// sets on both sides of the walk's list/bitset switch.
TEST(KvIndexTest, MatchesNaiveModelUnderRandomOperations) {
  KvIndex index;
  Random rng(12345);
  constexpr int kTargets = 80;
  std::vector<TargetId> ids;
  for (int i = 0; i < kTargets; ++i) ids.push_back(index.AddTarget({Name(i), 0}, 4));
  std::map<TargetId, std::map<BlockHash, uint32_t>> model;

  // A tree of chains: 6 roots, each 40 blocks, with branches.
  std::vector<std::vector<BlockHash>> chains;
  for (int r = 0; r < 6; ++r) {
    std::vector<BlockHash> c;
    for (int i = 0; i < 40; ++i) c.push_back(rng.Next());
    chains.push_back(c);
    for (int br = 0; br < 3; ++br) {
      std::vector<BlockHash> d(c.begin(), c.begin() + rng.Uniform(40));
      for (int i = 0; i < 20; ++i) d.push_back(rng.Next());
      chains.push_back(d);
    }
  }
  auto model_match = [&](TargetId t, std::span<const BlockHash> chain) {
    MatchCounts m;
    for (BlockHash h : chain) {
      auto it = model[t].find(h);
      if (it == model[t].end() || it->second == 0) break;
      if (it->second & 1) {
        ++m.device_hits;
      } else if (it->second & 2) {
        ++m.host_hits;
      } else {
        ++m.disk_hits;
      }
    }
    return m;
  };

  for (int step = 0; step < 3000; ++step) {
    const TargetId t = ids[rng.Uniform(kTargets)];
    const auto& chain = chains[rng.Uniform(chains.size())];
    const size_t from = rng.Uniform(chain.size());
    const size_t len = 1 + rng.Uniform(chain.size() - from);
    const std::span<const BlockHash> part(chain.data() + from, len);
    const Tier tier = rng.Uniform(4) == 0 ? static_cast<Tier>(1 + rng.Uniform(2)) : Tier::kDevice;
    const uint32_t bit = 1u << static_cast<int>(tier);
    const uint64_t op = rng.Uniform(10);
    if (op < 6) {
      index.InsertRouterHashes(t, part, tier);
      for (BlockHash h : part) model[t][h] |= bit;
    } else if (op < 9) {
      index.RemoveRouterHashes(t, part, tier);
      for (BlockHash h : part) {
        auto it = model[t].find(h);
        if (it != model[t].end() && (it->second &= ~bit) == 0) model[t].erase(it);
      }
    } else if (rng.Uniform(20) == 0) {
      index.ApplyCleared(t);
      model[t].clear();
    }
    if (step % 10 != 0) continue;
    // Query with a random candidate subset (sometimes all targets, in shuffled order).
    std::vector<TargetId> cands = ids;
    for (size_t i = cands.size(); i > 1; --i) std::swap(cands[i - 1], cands[rng.Uniform(i)]);
    cands.resize(rng.Uniform(2) ? kTargets : 1 + rng.Uniform(kTargets));
    const auto& q = chains[rng.Uniform(chains.size())];
    std::vector<MatchCounts> out(cands.size());
    index.FindMatches(q, cands, out);
    for (size_t i = 0; i < cands.size(); ++i) {
      const MatchCounts want = model_match(cands[i], q);
      ASSERT_EQ(out[i].device_hits, want.device_hits) << "step " << step << " cand " << i;
      ASSERT_EQ(out[i].host_hits, want.host_hits) << "step " << step;
      ASSERT_EQ(out[i].disk_hits, want.disk_hits) << "step " << step;
    }
  }
  size_t entries = 0;
  for (auto& [t, m] : model) {
    EXPECT_EQ(index.BlockCount(t), m.size());
    entries += m.size();
  }
  EXPECT_EQ(index.EntryCount(), entries);
  for (TargetId t : ids) index.RemoveTarget(t);
  EXPECT_EQ(index.EntryCount(), 0u);
  EXPECT_EQ(index.DistinctHashCount(), 0u);
}

TEST(KvIndexTest, WideSharedPrefixThenDivergingContinuations) {
  KvIndex index;
  std::vector<TargetId> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(index.AddTarget({Name(i), 0}, 16));
  Random rng(3);
  std::vector<BlockHash> prefix(128);
  for (auto& h : prefix) h = rng.Next();
  for (TargetId t : ids) index.InsertRouterHashes(t, prefix, Tier::kDevice);
  // Target 7 continues the prefix 50 more blocks; 200 and 201 share 10 of them.
  std::vector<BlockHash> chain = prefix;
  for (int i = 0; i < 60; ++i) chain.push_back(rng.Next());
  index.InsertRouterHashes(ids[7], std::span(chain).subspan(128, 50), Tier::kDevice);
  index.InsertRouterHashes(ids[200], std::span(chain).subspan(128, 10), Tier::kDevice);
  index.InsertRouterHashes(ids[201], std::span(chain).subspan(128, 10), Tier::kHost);
  std::vector<MatchCounts> out(ids.size());
  index.FindMatches(chain, ids, out);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t want = i == 7 ? 178 : (i == 200 || i == 201) ? 138 : 128;
    ASSERT_EQ(out[i].total(), want) << i;
  }
  EXPECT_EQ(out[201].host_hits, 10u);
  EXPECT_EQ(out[201].device_hits, 128u);
}

// Memory per block of one worker stays what doc/index.md "Memory" derives: per block
// stored through events, one 17-byte slot in the global table and one in the target's
// engine map, each table between 7/16 and 7/8 full: at most 2 * 17 / (7/16) ~ 78 B.
// (The issue measured ~85 B of RSS per block at 4M blocks; heap bytes are the
// deterministic part of that.) No bound per worker yet: that comes with scale-out.
TEST(KvIndexTest, HeapPerBlockOfOneWorkerStaysWithinTheDocumentedBound) {
  if (HeapInUse() == 0) GTEST_SKIP() << "mallinfo2 reads 0 under sanitizers' allocators";
  KvIndex index;
  const TargetId t = index.AddTarget({"one", 0}, 16);
  const size_t before = HeapInUse();
  Random rng(99);
  std::vector<BlockHash> engine(64);
  std::vector<TokenId> tokens(64 * 16);
  constexpr int kBatches = 12'000;  // 768,000 blocks
  for (int batch = 0; batch < kBatches; ++batch) {
    for (auto& e : engine) e = rng.Next();
    for (auto& tok : tokens) tok = static_cast<TokenId>(rng.Next());
    ASSERT_EQ(index.ApplyStored(t, std::nullopt, engine, tokens, Tier::kDevice), StoreOutcome::kOk);
  }
  ASSERT_EQ(index.BlockCount(t), size_t{kBatches} * 64);
  ASSERT_EQ(index.MappedEngineHashCount(t), size_t{kBatches} * 64);
  const double per_block =
      static_cast<double>(HeapInUse() - before) / static_cast<double>(index.BlockCount(t));
  RecordProperty("heap_bytes_per_block", std::to_string(per_block));
  EXPECT_LE(per_block, 2 * 17 / (7.0 / 16) + 2) << per_block << " B per block";
}

}  // namespace
}  // namespace infera::core
