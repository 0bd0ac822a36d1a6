// Bounded views (doc/index.md "Bounded views"): KvIndex::SetMaxBlocks against a naive
// bounded model that applies the documented rules with plain maps.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/hashing.h"
#include "core/kv_index.h"

namespace infera::core {
namespace {

constexpr size_t kBoundBlock = 4;
constexpr uint32_t kEpochs = 32;

struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t Uniform(size_t n) { return static_cast<size_t>(Next() % n); }
};

std::vector<BlockHash> Chain(std::span<const TokenId> tokens, BlockHash parent = 0) {
  std::vector<BlockHash> out;
  AppendChain(tokens, kBoundBlock, parent, out);
  return out;
}

// The naive bounded view of one target, straight from the rules: every engine hash
// maps to (router hash, epoch); the epoch advances every max(1, max/16) stored
// blocks (ages saturate at 31); past `max` blocks the youngest epochs that fit
// max − max/16 are kept with their chains to the root, fewer epochs while that does
// not fit, and everything else goes.
struct BoundedModel {
  size_t max = 0;
  uint32_t epoch = 0;
  size_t stored = 0;
  std::map<BlockHash, std::pair<BlockHash, uint32_t>> entries;  // engine -> (router, epoch)
  std::map<BlockHash, uint32_t> held;                           // router -> tiers
  bool evicted_since_clear = false;
  uint64_t evicted = 0;

  uint32_t Age(uint32_t e) const { return (epoch + kEpochs - e) % kEpochs; }
  void Stamp(BlockHash engine, BlockHash router) {
    entries[engine] = {router, epoch};
    if (max == 0 || ++stored < std::max<size_t>(1, max / 16)) return;
    stored = 0;
    const uint32_t next = (epoch + 1) % kEpochs;
    for (auto& [e, v] : entries) {
      if (v.second == next) v.second = (next + 1) % kEpochs;
    }
    epoch = next;
  }
  void Clear() {
    entries.clear();
    held.clear();
    stored = 0;
    evicted_since_clear = false;
  }
  void DropUnheldEntries() {
    for (auto it = entries.begin(); it != entries.end();) {
      it = held.count(it->second.first) ? std::next(it) : entries.erase(it);
    }
  }
  // The blocks kept for `keep` young epochs (their chains must be held to the root).
  std::set<BlockHash> Kept(uint32_t keep, const std::map<BlockHash, BlockHash>& parent_of) const {
    std::set<BlockHash> kept;
    for (const auto& [e, v] : entries) {
      if (Age(v.second) >= keep) continue;
      std::vector<BlockHash> path;
      bool ok = true;
      for (BlockHash h = v.first; h != 0; h = parent_of.at(h)) {
        if (!held.count(h)) {
          ok = false;
          break;
        }
        path.push_back(h);
      }
      if (ok) kept.insert(path.begin(), path.end());
    }
    return kept;
  }
  void MaybeEvict(const std::map<BlockHash, BlockHash>& parent_of) {
    if (max == 0 || held.size() <= max) return;
    const size_t before = held.size();
    const size_t goal = max - max / 16;
    std::map<uint32_t, size_t> per_age;
    for (const auto& [e, v] : entries) ++per_age[Age(v.second)];
    uint32_t keep = 0;
    for (size_t n = 0; keep < kEpochs && n + per_age[keep] <= goal; ++keep) n += per_age[keep];
    std::set<BlockHash> kept = Kept(keep, parent_of);
    while (kept.size() > goal && keep > 0) kept = Kept(--keep, parent_of);
    for (auto it = held.begin(); it != held.end();) {
      it = kept.count(it->first) ? std::next(it) : held.erase(it);
    }
    DropUnheldEntries();
    evicted += before - held.size();
    evicted_since_clear = true;
  }
};

// One engine per target: a prefix cache of `capacity` blocks over conversations that
// share a system prompt, evicting leaves (as vLLM and SGLang do) and losing some of
// its BlockRemoved messages on the way to the router.
struct Engine {
  std::map<BlockHash, BlockHash> parent;  // router hash -> parent (0: root), held blocks
  std::map<BlockHash, size_t> children;
};

BlockHash EngineHash(TargetId t, BlockHash router) {
  return router * 0x2545F4914F6CDD1Dull + t + 1;
}

void RunBounded(uint64_t seed, double lose_fraction) {
  Rng rng{seed};
  KvIndex index;
  const std::vector<size_t> bounds = {0, 6, 24, 70, 200};
  const size_t capacity = 60;
  std::vector<TargetId> ids;
  std::map<TargetId, BoundedModel> model;
  std::map<TargetId, Engine> engines;
  for (size_t i = 0; i < bounds.size(); ++i) {
    std::string name = "t";  // (+= : GCC 12's -Wrestrict false positive on "t" + ...)
    name += std::to_string(i);
    const TargetId t = index.AddTarget({name, 0}, kBoundBlock);
    index.SetMaxBlocks(t, bounds[i]);
    ids.push_back(t);
    model[t].max = bounds[i];
  }
  std::vector<TokenId> system(8 * kBoundBlock);
  for (auto& tok : system) tok = static_cast<TokenId>(1 + rng.Uniform(1000));
  std::vector<std::vector<TokenId>> prompts;
  for (int c = 0; c < 16; ++c) {
    std::vector<TokenId> p(system.begin(), system.begin() + (1 + rng.Uniform(8)) * kBoundBlock);
    const size_t extra = (4 + rng.Uniform(24)) * kBoundBlock;
    for (size_t i = 0; i < extra; ++i) p.push_back(static_cast<TokenId>(2000 + rng.Uniform(50000)));
    prompts.push_back(p);
  }
  std::map<BlockHash, BlockHash> parent_of;  // router hash -> parent router hash (0: root)
  for (const auto& p : prompts) {
    const auto c = Chain(p);
    for (size_t i = 0; i < c.size(); ++i) parent_of.emplace(c[i], i ? c[i - 1] : 0);
  }
  auto remove = [&](TargetId t, const std::vector<BlockHash>& router) {
    Engine& eng = engines[t];
    for (BlockHash h : router) {
      const BlockHash p = eng.parent.at(h);
      if (p != 0) --eng.children[p];
      eng.parent.erase(h);
      eng.children.erase(h);
    }
    if (static_cast<double>(rng.Uniform(1000)) < lose_fraction * 1000) return;  // lost
    std::vector<BlockHash> engine;
    for (BlockHash h : router) engine.push_back(EngineHash(t, h));
    index.ApplyRemoved(t, engine, Tier::kDevice);
    BoundedModel& m = model[t];
    for (BlockHash e : engine) {
      auto it = m.entries.find(e);
      if (it == m.entries.end()) continue;  // an evicted block: a no-op
      m.held.erase(it->second.first);
      m.entries.erase(it);
    }
  };
  for (int step = 0; step < 1500; ++step) {
    const TargetId t = ids[rng.Uniform(ids.size())];
    Engine& eng = engines[t];
    BoundedModel& m = model[t];
    const uint64_t evicted_before = index.EvictedBlocks(t);
    const size_t what = rng.Uniform(100);
    if (what < 2) {
      index.ApplyCleared(t);
      m.Clear();
      eng = Engine{};
    } else if (what < 70) {
      // A request: the engine stores what it lacks of the prompt's chain.
      const auto& p = prompts[rng.Uniform(prompts.size())];
      const auto chain = Chain(p);
      size_t run = 0;
      while (run < chain.size() && eng.parent.count(chain[run])) ++run;
      if (run == chain.size()) continue;
      const size_t len = 1 + rng.Uniform(chain.size() - run);
      std::vector<BlockHash> engine;
      for (size_t i = run; i < run + len; ++i) {
        engine.push_back(EngineHash(t, chain[i]));
        eng.parent[chain[i]] = i ? chain[i - 1] : 0;
        if (i) ++eng.children[chain[i - 1]];
      }
      std::optional<BlockHash> parent;
      if (run > 0) parent = EngineHash(t, chain[run - 1]);
      const std::span<const TokenId> toks(p.data() + run * kBoundBlock, len * kBoundBlock);
      const StoreOutcome got = index.ApplyStored(t, parent, engine, toks, Tier::kDevice);
      if (parent && !m.entries.count(*parent)) {
        // The router lost the parent: to its bound (skipped, not a gap) or otherwise.
        ASSERT_EQ(got, m.evicted_since_clear ? StoreOutcome::kEvictedParent
                                             : StoreOutcome::kUnknownParent)
            << "step " << step;
      } else {
        ASSERT_EQ(got, StoreOutcome::kOk) << "step " << step;
        for (size_t i = run; i < run + len; ++i) {
          m.held[chain[i]] |= 1;
          m.Stamp(EngineHash(t, chain[i]), chain[i]);
        }
        m.MaybeEvict(parent_of);
        // An eviction leaves the view prefix-closed: bisected, not walked.
        if (index.EvictedBlocks(t) > evicted_before) {
          ASSERT_TRUE(index.IsPrefixClosed(t)) << "step " << step;
        }
      }
      // The engine evicts leaves past its capacity, oldest prompt first.
      while (eng.parent.size() > capacity) {
        std::vector<BlockHash> leaves;
        for (const auto& [h, par] : eng.parent) {
          if (eng.children[h] == 0) leaves.push_back(h);
        }
        remove(t, {leaves[rng.Uniform(leaves.size())]});
      }
    } else if (!eng.parent.empty()) {
      // A few leaves go (several in one event).
      std::vector<BlockHash> batch;
      for (int k = 0; k < 3; ++k) {
        std::vector<BlockHash> leaves;
        for (const auto& [h, par] : eng.parent) {
          if (eng.children[h] == 0 && std::find(batch.begin(), batch.end(), h) == batch.end()) {
            leaves.push_back(h);
          }
        }
        if (leaves.empty()) break;
        batch.push_back(leaves[rng.Uniform(leaves.size())]);
        if (eng.parent.at(batch.back()) != 0) --eng.children[eng.parent.at(batch.back())];
      }
      for (BlockHash h : batch) {
        if (eng.parent.at(h) != 0) ++eng.children[eng.parent.at(h)];
      }
      remove(t, batch);
    }
    // Every view as the model has it; bounded views never above their bound.
    for (TargetId id : ids) {
      const BoundedModel& mm = model[id];
      ASSERT_EQ(index.BlockCount(id), mm.held.size()) << "target " << id << " step " << step;
      ASSERT_EQ(index.EvictedBlocks(id), mm.evicted) << "target " << id << " step " << step;
      if (mm.max > 0) {
        ASSERT_LE(index.BlockCount(id), mm.max);
      }
    }
    for (const auto& p : prompts) {
      const auto q = Chain(p);
      std::vector<MatchCounts> out(ids.size());
      index.FindMatches(q, ids, out);
      for (size_t i = 0; i < ids.size(); ++i) {
        size_t run = 0;
        while (run < q.size() && model[ids[i]].held.count(q[run])) ++run;
        ASSERT_EQ(out[i].device_hits, run) << "target " << ids[i] << " step " << step;
      }
    }
  }
  uint64_t evicted = 0;
  for (TargetId t : ids) evicted += index.EvictedBlocks(t);
  EXPECT_GT(evicted, 0u);
  EXPECT_EQ(index.EvictedBlocks(ids[0]), 0u);  // unbounded
}

TEST(KvIndexBoundTest, MatchesNaiveBoundedModelWithLostRemovals) {
  RunBounded(31, 0.2);
  RunBounded(32, 0.5);
}

TEST(KvIndexBoundTest, MatchesNaiveBoundedModelWithoutLosses) {
  RunBounded(33, 0.0);  // only the small bounds (below the engines' capacity) evict
}

TEST(KvIndexBoundTest, LostRemovalsNeverGrowTheViewPastTheBound) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, kBoundBlock);
  index.SetMaxBlocks(w, 1000);
  EXPECT_EQ(index.MaxBlocks(w), 1000u);
  // Every BlockRemoved is lost: 200k distinct blocks stored, the view stays bounded.
  Rng rng{5};
  size_t peak = 0;
  for (int i = 0; i < 25000; ++i) {
    std::vector<TokenId> toks(8 * kBoundBlock);
    for (auto& tok : toks) tok = static_cast<TokenId>(rng.Next());
    std::vector<BlockHash> engine(8);
    for (auto& e : engine) e = rng.Next();
    ASSERT_EQ(index.ApplyStored(w, std::nullopt, engine, toks, Tier::kDevice), StoreOutcome::kOk);
    peak = std::max(peak, index.BlockCount(w));
  }
  EXPECT_LE(peak, 1000u);
  EXPECT_GE(index.BlockCount(w), 800u);  // a sweep keeps all but the oldest epochs
  EXPECT_EQ(index.EvictedBlocks(w), 200000u - index.BlockCount(w));
  EXPECT_EQ(index.MappedEngineHashCount(w), index.BlockCount(w));
  EXPECT_LE(index.DistinctHashCount(), 1000u);
  EXPECT_TRUE(index.IsPrefixClosed(w));
}

TEST(KvIndexBoundTest, EvictedBlocksComeBackWhenRestoredAndTheirRemovalIsANoOp) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, kBoundBlock);
  index.SetMaxBlocks(w, 16);
  std::vector<TokenId> first(4 * kBoundBlock);
  for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<TokenId>(i + 1);
  ASSERT_EQ(
      index.ApplyStored(w, std::nullopt, std::vector<BlockHash>{1, 2, 3, 4}, first, Tier::kDevice),
      StoreOutcome::kOk);
  // 32 more root blocks: the first chain is the oldest and goes.
  for (BlockHash e = 100; e < 132; ++e) {
    std::vector<TokenId> toks(kBoundBlock, static_cast<TokenId>(e * 7));
    ASSERT_EQ(index.ApplyStored(w, std::nullopt, std::vector<BlockHash>{e}, toks, Tier::kDevice),
              StoreOutcome::kOk);
  }
  const auto chain = Chain(first);
  EXPECT_LE(index.BlockCount(w), 16u);
  EXPECT_FALSE(index.Holds(w, chain[0], Tier::kDevice));
  EXPECT_GT(index.EvictedBlocks(w), 0u);
  // A BlockRemoved of an evicted block: nothing removed, nothing else touched.
  const size_t blocks = index.BlockCount(w);
  const RemoveResult r = index.ApplyRemoved(w, std::vector<BlockHash>{4, 3}, Tier::kDevice);
  EXPECT_EQ(r.removed, 0u);
  EXPECT_EQ(r.unknown, 2u);
  EXPECT_EQ(index.BlockCount(w), blocks);
  // A continuation of an evicted block: skipped as such (not an unknown parent).
  std::vector<TokenId> more(kBoundBlock, 9);
  EXPECT_EQ(index.ApplyStored(w, BlockHash{4}, std::vector<BlockHash>{5}, more, Tier::kDevice),
            StoreOutcome::kEvictedParent);
  // The engine stores the chain again: it is back, matched from the root.
  ASSERT_EQ(
      index.ApplyStored(w, std::nullopt, std::vector<BlockHash>{1, 2, 3, 4}, first, Tier::kDevice),
      StoreOutcome::kOk);
  std::vector<MatchCounts> out(1);
  const TargetId c[] = {w};
  index.FindMatches(chain, c, out);
  EXPECT_EQ(out[0].total(), 4u);
  // After a clear an unknown parent is a gap again.
  index.ApplyCleared(w);
  EXPECT_EQ(index.ApplyStored(w, BlockHash{77}, std::vector<BlockHash>{5}, more, Tier::kDevice),
            StoreOutcome::kUnknownParent);
}

TEST(KvIndexBoundTest, ASharedPrefixStaysWhileYoungContinuationsHangBelowIt) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, kBoundBlock);
  index.SetMaxBlocks(w, 64);
  // The system prompt (8 blocks) is the oldest store; continuations keep coming.
  std::vector<TokenId> system(8 * kBoundBlock);
  for (size_t i = 0; i < system.size(); ++i) system[i] = static_cast<TokenId>(i + 1);
  std::vector<BlockHash> engine(8);
  for (size_t i = 0; i < 8; ++i) engine[i] = 1000 + i;
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, engine, system, Tier::kDevice), StoreOutcome::kOk);
  for (BlockHash e = 1; e <= 400; ++e) {
    std::vector<TokenId> toks(kBoundBlock, static_cast<TokenId>(e + 5000));
    ASSERT_EQ(index.ApplyStored(w, BlockHash{1007}, std::vector<BlockHash>{e}, toks, Tier::kDevice),
              StoreOutcome::kOk);
    ASSERT_LE(index.BlockCount(w), 64u);
  }
  const auto chain = Chain(system);
  for (BlockHash h : chain) EXPECT_TRUE(index.Holds(w, h, Tier::kDevice));
  EXPECT_GT(index.EvictedBlocks(w), 300u);
  EXPECT_TRUE(index.IsPrefixClosed(w));
}

TEST(KvIndexBoundTest, UnmappedBlocksPastTheBoundClearTheView) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, kBoundBlock);
  index.SetMaxBlocks(w, 10);
  // Engine hash counts that do not match the block count (a block-size mismatch):
  // the blocks cannot be aged, so the view is cleared once they pass the bound.
  for (int i = 0; i < 6; ++i) {
    std::vector<TokenId> toks(2 * kBoundBlock, static_cast<TokenId>(i * 100 + 1));
    toks[0] = static_cast<TokenId>(i);
    EXPECT_EQ(index.ApplyStored(w, std::nullopt, std::vector<BlockHash>{BlockHash(i + 1)}, toks,
                                Tier::kDevice),
              StoreOutcome::kCountMismatch);
    EXPECT_LE(index.BlockCount(w), 10u);
  }
  EXPECT_EQ(index.EvictedBlocks(w), 12u - index.BlockCount(w));
}

TEST(KvIndexBoundTest, LoweringTheBoundEvictsAtOnceAndANewTargetStartsUnbounded) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, kBoundBlock);
  for (BlockHash e = 1; e <= 100; ++e) {
    std::vector<TokenId> toks(kBoundBlock, static_cast<TokenId>(e));
    index.ApplyStored(w, std::nullopt, std::vector<BlockHash>{e}, toks, Tier::kDevice);
  }
  EXPECT_EQ(index.BlockCount(w), 100u);
  index.SetMaxBlocks(w, 32);
  EXPECT_LE(index.BlockCount(w), 32u);
  EXPECT_EQ(index.EvictedBlocks(w), 100u - index.BlockCount(w));
  index.RemoveTarget(w);
  const TargetId again = index.AddTarget({"w2", 0}, kBoundBlock);
  EXPECT_EQ(again, w);  // the id is reused; its bound and counter are not
  EXPECT_EQ(index.MaxBlocks(again), 0u);
  EXPECT_EQ(index.EvictedBlocks(again), 0u);
}

}  // namespace
}  // namespace infera::core
