#include "core/kv_index.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/clock.h"
#include "core/hashing.h"
#include "core/open_table.h"

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
  EXPECT_EQ(index.Key(b).ToString(), "a:1#dp1");
  index.RemoveTarget(a);
  EXPECT_FALSE(index.FindTarget({"a:1", 0}).has_value());
  EXPECT_EQ(index.Targets(), std::vector<TargetId>{b});
  EXPECT_EQ(index.AddTarget({"c:1", 0}, 16), a);  // id reused
}

// ViewVersion (LoadState::Settle skips a target whose view did not change): it moves
// with every change of the (hash, tier) set, not with a store of what is held already
// nor with a read, and never repeats, across targets, a reused id and indexes.
TEST(KvIndexTest, ViewVersionMovesWithEveryChangeOfTheView) {
  KvIndex index;
  const TargetId a = index.AddTarget({"a:1", 0}, 16);
  const TargetId b = index.AddTarget({"b:1", 0}, 16);
  std::set<uint64_t> seen = {index.ViewVersion(a), index.ViewVersion(b)};
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen.count(0), 0u);
  const auto changed = [&](TargetId t) { return seen.insert(index.ViewVersion(t)).second; };
  index.InsertRouterChain(a, 0, std::vector<BlockHash>{1, 2, 3}, Tier::kDevice);
  EXPECT_TRUE(changed(a));
  EXPECT_FALSE(changed(b));
  index.InsertRouterChain(a, 0, std::vector<BlockHash>{1, 2}, Tier::kDevice);  // held already
  EXPECT_FALSE(changed(a));
  std::vector<MatchCounts> out(2);
  index.FindMatches(std::vector<BlockHash>{1, 2}, std::vector<TargetId>{a, b}, out);
  EXPECT_FALSE(changed(a));
  index.InsertRouterHashes(a, std::vector<BlockHash>{2}, Tier::kHost);  // a second tier
  EXPECT_TRUE(changed(a));
  EXPECT_EQ(index.RemoveRouterHashes(a, std::vector<BlockHash>{9}, Tier::kDevice), 0u);
  EXPECT_FALSE(changed(a));
  EXPECT_EQ(index.RemoveRouterHashes(a, std::vector<BlockHash>{3}, Tier::kDevice), 1u);
  EXPECT_TRUE(changed(a));
  index.ApplyCleared(a);
  EXPECT_TRUE(changed(a));
  index.RemoveTarget(a);
  EXPECT_EQ(index.ViewVersion(a), 0u);
  EXPECT_EQ(index.AddTarget({"c:1", 0}, 16), a);  // id reused: a new version
  EXPECT_TRUE(changed(a));
  KvIndex other;  // another index (a restored one swapped in): other versions
  const TargetId o = other.AddTarget({"a:1", 0}, 16);
  other.InsertRouterChain(o, 0, std::vector<BlockHash>{1, 2, 3}, Tier::kDevice);
  EXPECT_TRUE(seen.insert(other.ViewVersion(o)).second);
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
  // small chunks + mmapped large ones + the huge arrays OpenTable maps itself
  return m.uordblks + m.hblkhd + open_table_mapped_bytes.load();
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

// The naive baseline: one map hash -> tier mask per target, the chain walked per
// target until its first miss. The oracle of the randomized tests.
struct NaiveModel {
  std::map<TargetId, std::map<BlockHash, uint32_t>> held;
  void Insert(TargetId t, std::span<const BlockHash> hs, Tier tier) {
    for (BlockHash h : hs) held[t][h] |= 1u << static_cast<int>(tier);
  }
  void Remove(TargetId t, std::span<const BlockHash> hs, Tier tier) {
    for (BlockHash h : hs) {
      auto it = held[t].find(h);
      if (it != held[t].end() && (it->second &= ~(1u << static_cast<int>(tier))) == 0) {
        held[t].erase(it);
      }
    }
  }
  MatchCounts Match(TargetId t, std::span<const BlockHash> chain) {
    MatchCounts m;
    for (BlockHash h : chain) {
      auto it = held[t].find(h);
      if (it == held[t].end()) break;
      if (it->second & 1) {
        ++m.device_hits;
      } else if (it->second & 2) {
        ++m.host_hits;
      } else {
        ++m.disk_hits;
      }
    }
    return m;
  }
  // The consecutive run of `chain` the target holds.
  size_t Run(TargetId t, std::span<const BlockHash> chain) { return Match(t, chain).total(); }
};

// The index's counts agree with the model; removing every target empties it.
void ExpectCountsThenRemoveAll(KvIndex& index, NaiveModel& model, std::span<const TargetId> ids) {
  size_t entries = 0;
  for (auto& [t, m] : model.held) {
    EXPECT_EQ(index.BlockCount(t), m.size());
    entries += m.size();
  }
  EXPECT_EQ(index.EntryCount(), entries);
  for (TargetId t : ids) index.RemoveTarget(t);
  EXPECT_EQ(index.EntryCount(), 0u);
  EXPECT_EQ(index.DistinctHashCount(), 0u);
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
  NaiveModel model;

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
  for (int step = 0; step < 3000; ++step) {
    const TargetId t = ids[rng.Uniform(kTargets)];
    const auto& chain = chains[rng.Uniform(chains.size())];
    const size_t from = rng.Uniform(chain.size());
    const size_t len = 1 + rng.Uniform(chain.size() - from);
    const std::span<const BlockHash> part(chain.data() + from, len);
    const Tier tier = rng.Uniform(4) == 0 ? static_cast<Tier>(1 + rng.Uniform(2)) : Tier::kDevice;
    const uint64_t op = rng.Uniform(10);
    if (op < 6) {
      index.InsertRouterHashes(t, part, tier);
      model.Insert(t, part, tier);
    } else if (op < 9) {
      index.RemoveRouterHashes(t, part, tier);
      model.Remove(t, part, tier);
    } else if (rng.Uniform(20) == 0) {
      index.ApplyCleared(t);
      model.held[t].clear();
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
      const MatchCounts want = model.Match(cands[i], q);
      ASSERT_EQ(out[i].device_hits, want.device_hits) << "step " << step << " cand " << i;
      ASSERT_EQ(out[i].host_hits, want.host_hits) << "step " << step;
      ASSERT_EQ(out[i].disk_hits, want.disk_hits) << "step " << step;
    }
  }
  ExpectCountsThenRemoveAll(index, model, ids);
}

// A forest of chains with consistent parents (every hash has one parent, as chained
// router hashes do): roots of `length` blocks, branches forking off at random depths.
struct Forest {
  std::vector<std::vector<BlockHash>> chains;
  Forest(Random& rng, int roots, int branches, size_t length) {
    for (int r = 0; r < roots; ++r) {
      std::vector<BlockHash> c;
      for (size_t i = 0; i < length; ++i) c.push_back(rng.Next());
      chains.push_back(c);
      for (int b = 0; b < branches; ++b) {
        const auto& base = chains[chains.size() - 1 - rng.Uniform(b + 1)];
        std::vector<BlockHash> d(base.begin(), base.begin() + 1 + rng.Uniform(base.size() - 1));
        while (d.size() < length) d.push_back(rng.Next());
        chains.push_back(d);
      }
    }
  }
};

struct DifferentialCase {
  int targets;
  int steps;
  bool closed_ops_only;  // only operations that keep views prefix-closed
  uint64_t seed;
};

// Randomized differential test of FindMatches against the naive baseline, through
// every path: bisection (prefix-closed single-tier targets), the linear walk (views
// that are not prefix-closed: removals from the middle, unlinked inserts, several
// tiers), and both at once.
void RunDifferential(const DifferentialCase& c) {
  KvIndex index;
  Random rng(c.seed);
  std::vector<TargetId> ids;
  for (int i = 0; i < c.targets; ++i) ids.push_back(index.AddTarget({Name(i), 0}, 4));
  NaiveModel model;
  const Forest forest(rng, 6, 5, 48);
  const auto& chains = forest.chains;
  // A few widely held prefixes, so rows go dense (> 32 holders).
  for (int k = 0; k < 3; ++k) {
    const auto& ch = chains[rng.Uniform(chains.size())];
    const size_t len = 1 + rng.Uniform(ch.size());
    for (TargetId t : ids) {
      if (rng.Uniform(4) == 0) continue;
      const size_t from = model.Run(t, ch);
      if (from >= len) continue;
      const std::span<const BlockHash> part(ch.data() + from, len - from);
      index.InsertRouterChain(t, from ? ch[from - 1] : 0, part, Tier::kDevice);
      model.Insert(t, part, Tier::kDevice);
    }
  }
  size_t bisected_queries = 0;
  for (int step = 0; step < c.steps; ++step) {
    const TargetId t = ids[rng.Uniform(ids.size())];
    const auto& chain = chains[rng.Uniform(chains.size())];
    const size_t run = model.Run(t, chain);
    const uint64_t op = rng.Uniform(c.closed_ops_only ? 10 : 16);
    if (op < 5) {
      // Extend the target's run of this chain (its parent is held: stays closed).
      if (run < chain.size()) {
        const size_t len = 1 + rng.Uniform(chain.size() - run);
        const std::span<const BlockHash> part(chain.data() + run, len);
        index.InsertRouterChain(t, run ? chain[run - 1] : 0, part, Tier::kDevice);
        model.Insert(t, part, Tier::kDevice);
      }
    } else if (op < 9) {
      // Evict leaf-first: the tail of the run, deepest block first. The index must
      // notice when another chain of the target still hangs below a removed block.
      if (run > 0) {
        const size_t keep = rng.Uniform(run);
        std::vector<BlockHash> tail(chain.begin() + keep, chain.begin() + run);
        std::reverse(tail.begin(), tail.end());
        const size_t removed = index.RemoveRouterHashes(t, tail, Tier::kDevice);
        if (c.closed_ops_only) {
          EXPECT_EQ(removed, tail.size());
        }
        model.Remove(t, tail, Tier::kDevice);
      }
    } else if (op < 10) {
      if (rng.Uniform(8) == 0) {
        index.ApplyCleared(t);
        model.held[t].clear();
        EXPECT_TRUE(index.IsPrefixClosed(t));
      }
    } else if (op < 12) {
      // Remove a random stretch (may leave orphans behind).
      const size_t from = rng.Uniform(chain.size());
      const size_t len = 1 + rng.Uniform(std::min<size_t>(4, chain.size() - from));
      const std::span<const BlockHash> part(chain.data() + from, len);
      index.RemoveRouterHashes(t, part, Tier::kDevice);
      model.Remove(t, part, Tier::kDevice);
    } else if (op < 14) {
      // Insert a stretch whose parent may not be held (a chain with a gap).
      const size_t from = rng.Uniform(chain.size());
      const size_t len = 1 + rng.Uniform(chain.size() - from);
      const std::span<const BlockHash> part(chain.data() + from, len);
      index.InsertRouterChain(t, from ? chain[from - 1] : 0, part, Tier::kDevice);
      model.Insert(t, part, Tier::kDevice);
    } else if (op < 15) {
      // Unlinked insert, or another tier (host copies, some removed again).
      const size_t from = rng.Uniform(chain.size());
      const std::span<const BlockHash> part(chain.data() + from, chain.size() - from);
      const Tier tier = rng.Uniform(2) ? Tier::kDevice : Tier::kHost;
      index.InsertRouterHashes(t, part, tier);
      model.Insert(t, part, tier);
    } else {
      const size_t len = std::min(chain.size(), 1 + rng.Uniform(run + 1));
      const std::span<const BlockHash> part(chain.data(), len);
      const Tier tier = rng.Uniform(2) ? Tier::kHost : Tier::kDisk;
      if (rng.Uniform(2)) {
        index.InsertRouterChain(t, 0, part, tier);
        model.Insert(t, part, tier);
      } else {
        index.RemoveRouterHashes(t, part, tier);
        model.Remove(t, part, tier);
      }
    }
    if (step % 5 != 0) continue;
    std::vector<TargetId> cands = ids;
    for (size_t i = cands.size(); i > 1; --i) std::swap(cands[i - 1], cands[rng.Uniform(i)]);
    cands.resize(rng.Uniform(2) ? cands.size() : 1 + rng.Uniform(cands.size()));
    // A chain of the forest cut anywhere, sometimes continued by new blocks.
    const auto& base = chains[rng.Uniform(chains.size())];
    std::vector<BlockHash> q(base.begin(), base.begin() + 1 + rng.Uniform(base.size()));
    for (size_t extra = rng.Uniform(3) ? 0 : rng.Uniform(20); extra > 0; --extra) {
      q.push_back(rng.Next());
    }
    std::vector<MatchCounts> out(cands.size());
    index.FindMatches(q, cands, out);
    for (size_t i = 0; i < cands.size(); ++i) {
      const MatchCounts want = model.Match(cands[i], q);
      ASSERT_EQ(out[i].device_hits, want.device_hits) << "step " << step << " target " << cands[i];
      ASSERT_EQ(out[i].host_hits, want.host_hits) << "step " << step << " target " << cands[i];
      ASSERT_EQ(out[i].disk_hits, want.disk_hits) << "step " << step << " target " << cands[i];
      bisected_queries += index.IsPrefixClosed(cands[i]);
    }
  }
  // The shortcut was exercised, not only the fallback.
  EXPECT_GT(bisected_queries, 0u);
  ExpectCountsThenRemoveAll(index, model, ids);
}

TEST(KvIndexTest, BisectionMatchesNaiveBaselineWithLeafFirstEviction) {
  for (uint64_t seed : {1, 2, 3}) {
    RunDifferential({.targets = 6, .steps = 1500, .closed_ops_only = true, .seed = seed});
    RunDifferential({.targets = 90, .steps = 1500, .closed_ops_only = true, .seed = seed});
  }
}

TEST(KvIndexTest, MatchesNaiveBaselineWithViewsThatAreNotPrefixClosed) {
  for (uint64_t seed : {11, 12, 13}) {
    RunDifferential({.targets = 3, .steps = 2000, .closed_ops_only = false, .seed = seed});
    RunDifferential({.targets = 40, .steps = 2000, .closed_ops_only = false, .seed = seed});
    RunDifferential({.targets = 300, .steps = 2000, .closed_ops_only = false, .seed = seed});
  }
}

TEST(KvIndexTest, PrefixClosedFlagFollowsTheView) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, 4);
  Random rng(5);
  std::vector<BlockHash> chain(8);
  for (auto& h : chain) h = rng.Next();
  std::vector<BlockHash> branch(chain.begin(), chain.begin() + 4);
  for (int i = 0; i < 4; ++i) branch.push_back(rng.Next());
  index.InsertRouterChain(w, 0, chain, Tier::kDevice);
  index.InsertRouterChain(w, branch[3], std::span(branch).subspan(4), Tier::kDevice);
  EXPECT_TRUE(index.IsPrefixClosed(w));
  // Leaf-first eviction of the first chain's tail keeps it closed ...
  const std::vector<BlockHash> tail = {chain[7], chain[6], chain[5], chain[4]};
  EXPECT_EQ(index.RemoveRouterHashes(w, tail, Tier::kDevice), 4u);
  EXPECT_TRUE(index.IsPrefixClosed(w));
  // ... evicting block 3, under which the branch still hangs, does not.
  EXPECT_EQ(index.RemoveRouterHashes(w, std::vector<BlockHash>{chain[3]}, Tier::kDevice), 1u);
  EXPECT_FALSE(index.IsPrefixClosed(w));
  std::vector<BlockHash> q = branch;
  EXPECT_EQ(MatchOne(index, q, w).total(), 3u);  // exact all the same
  index.ApplyCleared(w);
  EXPECT_TRUE(index.IsPrefixClosed(w));
  // Unlinked inserts (no parents known) are walked, never bisected.
  index.InsertRouterHashes(w, chain, Tier::kDevice);
  EXPECT_FALSE(index.IsPrefixClosed(w));
  EXPECT_EQ(MatchOne(index, chain, w).total(), 8u);
}

// The event path (ApplyStored / ApplyRemoved) against the naive baseline. With
// leaf-first removals every view stays prefix-closed; otherwise views lose the flag,
// are walked, and are proven closed again (Recheck) once their orphans are gone.
void RunEventPath(bool leaf_first, uint64_t seed) {
  KvIndex index;
  Random rng(seed);
  std::vector<TargetId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(index.AddTarget({Name(i), 0}, 4));
  // Conversations: token prompts sharing a system prefix.
  const auto system = Tokens(32, 1);
  std::vector<std::vector<TokenId>> prompts;
  for (int c = 0; c < 12; ++c) {
    std::vector<TokenId> p = system;
    for (int i = 0; i < 40; ++i) p.push_back(static_cast<TokenId>(1000 + rng.Uniform(50000)));
    prompts.push_back(p);
  }
  // Engine hashes: a distinct id per (target, block position, prompt prefix).
  std::map<std::pair<TargetId, BlockHash>, BlockHash> engine_of;
  NaiveModel model;
  std::map<TargetId, std::map<size_t, size_t>> stored;  // target -> prompt -> blocks
  for (int step = 0; step < 400; ++step) {
    const TargetId t = ids[rng.Uniform(ids.size())];
    const size_t p = rng.Uniform(prompts.size());
    const auto chain = HashChain(prompts[p], 4);
    const size_t run = model.Run(t, chain);
    if (rng.Uniform(3) != 0 && run < chain.size()) {
      const size_t len = 1 + rng.Uniform(chain.size() - run);
      std::vector<BlockHash> engine;
      for (size_t i = run; i < run + len; ++i) {
        auto [it, fresh] = engine_of.try_emplace({t, chain[i]}, rng.Next());
        engine.push_back(it->second);
      }
      std::optional<BlockHash> parent;
      if (run > 0) parent = engine_of.at({t, chain[run - 1]});
      const std::span<const TokenId> toks(prompts[p].data() + run * 4, len * 4);
      ASSERT_EQ(index.ApplyStored(t, parent, engine, toks, Tier::kDevice), StoreOutcome::kOk);
      model.Insert(t, std::span(chain).subspan(run, len), Tier::kDevice);
    } else if (run > 0) {
      // Leaf-first, as engines evict: never below a block another of the target's
      // conversations still continues from.
      size_t floor = 0;
      for (size_t o = 0; o < prompts.size(); ++o) {
        if (o == p) continue;
        const auto other = HashChain(prompts[o], 4);
        size_t shared = 0;
        while (shared < other.size() && other[shared] == chain[shared]) ++shared;
        floor = std::max(floor, std::min(shared, model.Run(t, other)));
      }
      if (!leaf_first) floor = 0;
      if (floor >= run) continue;
      const size_t keep = floor + rng.Uniform(run - floor);
      std::vector<BlockHash> engine;
      std::vector<BlockHash> router;
      for (size_t i = run; i-- > keep;) {
        engine.push_back(engine_of.at({t, chain[i]}));
        router.push_back(chain[i]);
      }
      index.ApplyRemoved(t, engine, Tier::kDevice);
      model.Remove(t, router, Tier::kDevice);
    }
    for (const auto& prompt : prompts) {
      const auto q = HashChain(prompt, 4);
      std::vector<MatchCounts> out(ids.size());
      index.FindMatches(q, ids, out);
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(out[i].device_hits, model.Match(ids[i], q).device_hits) << "step " << step;
      }
    }
  }
  // Stores always continue a held parent and removals are leaf-first: every view
  // stayed prefix-closed, so every query above was answered by bisection.
  if (leaf_first) {
    for (TargetId t : ids) EXPECT_TRUE(index.IsPrefixClosed(t)) << t;
  }
}

TEST(KvIndexTest, EventPathStaysPrefixClosedAndExact) {
  RunEventPath(/*leaf_first=*/true, 21);
  RunEventPath(/*leaf_first=*/true, 22);
}

TEST(KvIndexTest, EventPathWithNonLeafRemovalsStaysExact) {
  RunEventPath(/*leaf_first=*/false, 23);
  RunEventPath(/*leaf_first=*/false, 24);
}

TEST(KvIndexTest, RecheckRestoresPrefixClosedOnceOrphansAreGone) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, 4);
  const auto tokens = Tokens(16, 1);  // blocks 0..3, engine hashes 1..4
  ASSERT_EQ(
      index.ApplyStored(w, std::nullopt, std::vector<BlockHash>{1, 2, 3, 4}, tokens, Tier::kDevice),
      StoreOutcome::kOk);
  // Evict block 1 while 2 and 3 hang below it: no longer prefix-closed.
  index.ApplyRemoved(w, std::vector<BlockHash>{2}, Tier::kDevice);
  EXPECT_FALSE(index.IsPrefixClosed(w));
  const auto chain = HashChain(tokens, 4);
  EXPECT_EQ(MatchOne(index, chain, w).total(), 1u);
  // The orphans go; after enough further events the view is proven closed again.
  index.ApplyRemoved(w, std::vector<BlockHash>{4, 3}, Tier::kDevice);
  Random rng(9);
  for (int i = 0; i < 40 && !index.IsPrefixClosed(w); ++i) {
    std::vector<TokenId> other(8);
    for (auto& tok : other) tok = static_cast<TokenId>(rng.Next());
    const std::vector<BlockHash> engine = {rng.Next(), rng.Next()};
    index.ApplyStored(w, std::nullopt, engine, other, Tier::kDevice);
  }
  EXPECT_TRUE(index.IsPrefixClosed(w));
  EXPECT_EQ(MatchOne(index, chain, w).total(), 1u);
}

// Rows name their parent by row index: a row nobody holds any more stays while a row
// names it as parent (so that index never dangles), and goes with its last child row.
TEST(KvIndexTest, ParentRowStaysWhileAChildRowNamesItAndGoesWithIt) {
  KvIndex index;
  const TargetId a = index.AddTarget({"a", 0}, 4);
  const TargetId b = index.AddTarget({"b", 0}, 4);
  const auto tokens = Tokens(12, 1);
  const auto chain = HashChain(tokens, 4);  // p, c, d
  ASSERT_EQ(
      index.ApplyStored(a, std::nullopt, std::vector<BlockHash>{1, 2, 3}, tokens, Tier::kDevice),
      StoreOutcome::kOk);
  // a evicts the middle block: its row is unheld but still names p and is named by d.
  EXPECT_EQ(index.ApplyRemoved(a, std::vector<BlockHash>{2}, Tier::kDevice).removed, 1u);
  EXPECT_EQ(index.DistinctHashCount(), 2u);
  EXPECT_EQ(index.EntryCount(), 2u);
  EXPECT_FALSE(index.IsPrefixClosed(a));
  // b stores the same chain: the kept row is held again, by b, and b stays closed.
  ASSERT_EQ(
      index.ApplyStored(b, std::nullopt, std::vector<BlockHash>{7, 8, 9}, tokens, Tier::kDevice),
      StoreOutcome::kOk);
  EXPECT_TRUE(index.IsPrefixClosed(b));
  EXPECT_EQ(index.DistinctHashCount(), 3u);
  EXPECT_EQ(MatchOne(index, chain, a).total(), 1u);
  EXPECT_EQ(MatchOne(index, chain, b).total(), 3u);
  // b evicts leaf first; then a drops the rest: every row goes.
  EXPECT_EQ(index.ApplyRemoved(b, std::vector<BlockHash>{9, 8, 7}, Tier::kDevice).removed, 3u);
  EXPECT_TRUE(index.IsPrefixClosed(b));
  EXPECT_EQ(index.DistinctHashCount(), 2u);
  EXPECT_EQ(index.ApplyRemoved(a, std::vector<BlockHash>{1}, Tier::kDevice).removed, 1u);
  EXPECT_EQ(index.DistinctHashCount(), 1u);  // d's row is still held by a, so is c's
  EXPECT_EQ(index.ApplyRemoved(a, std::vector<BlockHash>{3}, Tier::kDevice).removed, 1u);
  EXPECT_EQ(index.DistinctHashCount(), 0u);
  EXPECT_EQ(index.EntryCount(), 0u);
  EXPECT_EQ(MatchOne(index, chain, a).total(), 0u);
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

// The linear walk (views not known prefix-closed) looks rows up ahead of use and
// prefetches their holder sets (doc/index.md "The linear walk"): long chains whose
// blocks have 1..40 holders (inline rows, sets with holders inside, sets with a heap
// array, dense sets), runs ending on every side of the look-ahead ring, candidate
// lists of every size, checked against the naive model.
TEST(KvIndexTest, LinearWalkLookAheadMatchesNaiveModel) {
  KvIndex index;
  std::vector<TargetId> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(index.AddTarget({Name(i), 0}, 16));
  NaiveModel model;
  Random rng(77);
  std::vector<BlockHash> chain(200);
  for (auto& h : chain) h = rng.Next();
  // Target i holds a random-length run of the chain (unlinked: never bisected), so
  // block b has as many holders as there are runs longer than b.
  for (TargetId t : ids) {
    const size_t run = 1 + rng.Uniform(chain.size());
    const std::span<const BlockHash> part(chain.data(), run);
    const Tier tier = rng.Uniform(5) == 0 ? Tier::kHost : Tier::kDevice;
    index.InsertRouterHashes(t, part, tier);
    model.Insert(t, part, tier);
  }
  for (int q = 0; q < 300; ++q) {
    std::vector<TargetId> cands = ids;
    for (size_t i = cands.size(); i > 1; --i) std::swap(cands[i - 1], cands[rng.Uniform(i)]);
    cands.resize(1 + rng.Uniform(cands.size()));
    std::vector<BlockHash> query(chain.begin(), chain.begin() + 1 + rng.Uniform(chain.size()));
    if (rng.Uniform(2)) query.push_back(rng.Next());
    std::vector<MatchCounts> out(cands.size());
    index.FindMatches(query, cands, out);
    for (size_t i = 0; i < cands.size(); ++i) {
      ASSERT_FALSE(index.IsPrefixClosed(cands[i]));
      const MatchCounts want = model.Match(cands[i], query);
      ASSERT_EQ(out[i].device_hits, want.device_hits) << "query " << q << " target " << cands[i];
      ASSERT_EQ(out[i].host_hits, want.host_hits) << "query " << q << " target " << cands[i];
    }
  }
  ExpectCountsThenRemoveAll(index, model, ids);
}

// Memory per block of one worker stays what doc/index.md "Memory" derives: per block
// stored through events, one 16-byte row + 1 control byte in the global table and one
// 12-byte entry + 1 control byte in the target's engine map, each table at least
// 70 % full (OpenTable::kMinLoad): at most (17 + 13) / 0.7 ~ 42.9 B, plus the huge-page
// rounding of the row array (under 4 MiB in all). No bound per worker yet: that comes
// with scale-out.
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
  const double bound = (17.0 + 13.0) / 0.7 + (4u << 20) / static_cast<double>(index.BlockCount(t));
  EXPECT_LE(per_block, bound) << per_block << " B per block";
  // TableBytes (the /metrics gauge infera_kv_index_table_bytes) is what the heap grew
  // by: the tables are all the index holds per block.
  const double tables = static_cast<double>(index.TableBytes());
  EXPECT_LE(tables, static_cast<double>(HeapInUse() - before) + (1u << 20));
  // (HeapInUse counts the row arrays rounded up to 2 MiB each.)
  EXPECT_GE(tables, 0.9 * (static_cast<double>(HeapInUse() - before) - (4u << 20)));
}

// TableBytes follows the documented bytes (doc/index.md "Memory") without reading the
// allocator (so under sanitizers too): (16 + 1) B per row slot, (12 + 1) B per engine-map
// slot, each table between kMinLoad and kMaxLoad full after a fill (a growth makes room
// for the batch too: 2 % slack); 0 once empty.
TEST(KvIndexTest, TableBytesCountsRowsAndEngineMapsAtTheirLoad) {
  KvIndex index;
  EXPECT_EQ(index.TableBytes(), 0u);
  std::vector<TargetId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(index.AddTarget({"t" + std::to_string(i), 0}, 4));
  Random rng(3);
  std::vector<BlockHash> engine(32);
  std::vector<TokenId> tokens(32 * 4);
  for (int batch = 0; batch < 400; ++batch) {
    for (auto& e : engine) e = rng.Next();
    for (auto& tok : tokens) tok = static_cast<TokenId>(rng.Next());
    ASSERT_EQ(index.ApplyStored(ids[batch % 4], std::nullopt, engine, tokens, Tier::kDevice),
              StoreOutcome::kOk);
  }
  const double blocks = 400.0 * 32;
  ASSERT_EQ(index.EntryCount(), static_cast<size_t>(blocks));
  const double per_block = static_cast<double>(index.TableBytes()) / blocks;
  EXPECT_GE(per_block, (17.0 + 13.0) * 8 / 7);
  EXPECT_LE(per_block, 1.02 * (17.0 + 13.0) / 0.7);
  for (const TargetId id : ids) index.RemoveTarget(id);
  EXPECT_EQ(index.TableBytes(), 0u);
}

}  // namespace
}  // namespace infera::core
