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

// How RunBounded applies events: whole calls, or in parts with the index's pending
// work done in small steps while another target's writes move the rows in between
// (doc/index.md "Bounded work": the writer releases its lock between steps).
enum class Apply { kWhole, kStepped };

void RunBounded(uint64_t seed, double lose_fraction, Apply mode = Apply::kWhole) {
  Rng rng{seed};
  KvIndex index;
  // Stepped: a target outside the model whose stores and clears make the row table
  // grow, rebuild and shrink between steps.
  const TargetId noise = index.AddTarget({"noise", 0}, kBoundBlock);
  auto step_pending = [&](TargetId t) {
    while (index.HasPendingWork(t)) {
      ASSERT_GT(index.DoPendingWork(t, 1 + rng.Uniform(7)), 0u);
      if (rng.Uniform(4) == 0) {
        std::vector<BlockHash> h(1 + rng.Uniform(40));
        for (auto& x : h) x = rng.Next() | 1;
        index.InsertRouterHashes(noise, h, Tier::kDevice);
      } else if (rng.Uniform(40) == 0) {
        index.ApplyCleared(noise);
      }
    }
  };
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
    if (mode == Apply::kWhole) {
      index.ApplyRemoved(t, engine, Tier::kDevice);
    } else {
      for (size_t at = 0; at < engine.size();) {
        const size_t n = std::min(engine.size() - at, 1 + rng.Uniform(3));
        index.ApplyRemovedPart(t, std::span<const BlockHash>(engine).subspan(at, n), Tier::kDevice);
        at += n;
      }
      step_pending(t);
    }
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
      StoreOutcome got;
      if (mode == Apply::kWhole) {
        got = index.ApplyStored(t, parent, engine, toks, Tier::kDevice);
      } else {
        // One part (the model evicts after whole events), then the sweep in steps.
        StoreCursor cursor;
        got = index.ApplyStoredPart(t, parent, engine, toks, Tier::kDevice, {}, cursor, SIZE_MAX);
        EXPECT_TRUE(cursor.done);
        step_pending(t);
      }
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

TEST(KvIndexBoundTest, SweepsInStepsWhileRowsMoveMatchTheModel) {
  RunBounded(34, 0.2, Apply::kStepped);
  RunBounded(35, 0.5, Apply::kStepped);
}

// FindMatches over the target's current view, naively (the answer a reader between
// two steps must get).
void ExpectMatchesNaive(const KvIndex& index, TargetId t,
                        const std::vector<std::vector<BlockHash>>& chains) {
  const std::vector<BlockHash> held = index.RouterHashes(t);
  const std::set<BlockHash> view(held.begin(), held.end());
  const TargetId c[] = {t};
  for (const auto& q : chains) {
    std::vector<MatchCounts> out(1);
    index.FindMatches(q, c, out);
    size_t run = 0;
    while (run < q.size() && view.count(q[run])) ++run;
    ASSERT_EQ(out[0].total(), run);
  }
}

TEST(KvIndexBoundTest, StoresInPartsEqualWholeStoresAndReadersSeeExactViewsBetween) {
  Rng rng{41};
  KvIndex whole, parts;
  const TargetId a = whole.AddTarget({"w", 0}, kBoundBlock);
  const TargetId b = parts.AddTarget({"w", 0}, kBoundBlock);
  std::vector<std::vector<BlockHash>> chains;
  std::vector<std::pair<std::vector<BlockHash>, std::vector<BlockHash>>> stored;  // router, engine
  BlockHash next_engine = 1;
  for (int step = 0; step < 200; ++step) {
    // A continuation of a stored chain (or a root), 1..40 blocks.
    std::optional<BlockHash> parent;
    BlockHash parent_router = 0;
    if (!stored.empty() && rng.Uniform(3) != 0) {
      const auto& [r, e] = stored[rng.Uniform(stored.size())];
      const size_t at = rng.Uniform(r.size());
      parent = e[at];
      parent_router = r[at];
    }
    std::vector<TokenId> toks((1 + rng.Uniform(40)) * kBoundBlock);
    for (auto& tok : toks) tok = static_cast<TokenId>(rng.Uniform(100000));
    std::vector<BlockHash> router = Chain(toks, parent_router);
    std::vector<BlockHash> engine(router.size());
    for (auto& e : engine) e = next_engine++;
    // (The parent may have been removed: then both refuse the event.)
    const StoreOutcome want = whole.ApplyStored(a, parent, engine, toks, Tier::kDevice);
    StoreCursor cursor;
    while (!cursor.done) {
      ASSERT_EQ(
          parts.ApplyStoredPart(b, parent, engine, toks, Tier::kDevice, {}, cursor, 1 + rng.Uniform(6)),
          want);
      if (step % 8 == 0) ExpectMatchesNaive(parts, b, chains);
    }
    if (want == StoreOutcome::kOk) {
      EXPECT_EQ(cursor.next_block, router.size());
      chains.push_back(router);
      stored.emplace_back(router, engine);
    }
    if (rng.Uniform(5) == 0) {
      // Removals in pieces (leaves and inner blocks: the views stop being closed).
      const auto& [r, e] = stored[rng.Uniform(stored.size())];
      const size_t from = rng.Uniform(e.size());
      const std::span<const BlockHash> gone(e.data() + from, e.size() - from);
      whole.ApplyRemoved(a, gone, Tier::kDevice);
      for (size_t at = 0; at < gone.size(); at += 2) {
        parts.ApplyRemovedPart(b, gone.subspan(at, std::min<size_t>(2, gone.size() - at)),
                               Tier::kDevice);
      }
      while (parts.HasPendingWork(b)) parts.DoPendingWork(b, 1);
    }
    ASSERT_EQ(whole.BlockCount(a), parts.BlockCount(b)) << "step " << step;
    ASSERT_EQ(whole.MappedEngineHashCount(a), parts.MappedEngineHashCount(b)) << "step " << step;
    ExpectMatchesNaive(parts, b, chains);  // (closed or not: when each proof runs differs)
    auto x = whole.RouterHashes(a), y = parts.RouterHashes(b);
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    ASSERT_EQ(x, y) << "step " << step;
  }
}

TEST(KvIndexBoundTest, GrowthPreparedOffTheLockGivesTheSameIndex) {
  // Two indexes get the same stores, removals and sweeps; one grows its tables only
  // through PrepareGrowth / InstallGrowth (as the router's writer does before each
  // slice), the other inside its calls. A plan prepared before another write is stale.
  Rng rng{47};
  KvIndex plain, planned;
  std::vector<TargetId> a, b;
  for (int i = 0; i < 3; ++i) {
    a.push_back(plain.AddTarget({"t" + std::to_string(i), 0}, kBoundBlock));
    b.push_back(planned.AddTarget({"t" + std::to_string(i), 0}, kBoundBlock));
    plain.SetMaxBlocks(a.back(), 3000);
    planned.SetMaxBlocks(b.back(), 3000);
  }
  std::vector<std::vector<BlockHash>> chains;
  BlockHash next_engine = 1;
  size_t installed = 0, stale = 0;
  for (int step = 0; step < 400; ++step) {
    const size_t k = rng.Uniform(3);
    std::vector<TokenId> toks((1 + rng.Uniform(64)) * kBoundBlock);
    for (auto& tok : toks) tok = static_cast<TokenId>(rng.Uniform(1000000));
    std::vector<BlockHash> engine(toks.size() / kBoundBlock);
    for (auto& e : engine) e = next_engine++;
    GrowthPlan plan = planned.PrepareGrowth(b[k], engine.size());
    if (!plan.empty() && rng.Uniform(4) == 0) {
      // Another write first: the plan must not be installed.
      planned.ApplyCleared(b[(k + 1) % 3]);
      plain.ApplyCleared(a[(k + 1) % 3]);
      EXPECT_FALSE(planned.InstallGrowth(plan));
      ++stale;
    } else if (!plan.empty()) {
      ASSERT_TRUE(planned.InstallGrowth(plan));
      ++installed;
    }
    ASSERT_EQ(plain.ApplyStored(a[k], std::nullopt, engine, toks, Tier::kDevice),
              planned.ApplyStored(b[k], std::nullopt, engine, toks, Tier::kDevice));
    chains.push_back(Chain(toks));
    if (rng.Uniform(3) == 0) {
      const size_t from = rng.Uniform(engine.size());
      const std::span<const BlockHash> gone(engine.data() + from, engine.size() - from);
      plain.ApplyRemoved(a[k], gone, Tier::kDevice);
      planned.ApplyRemoved(b[k], gone, Tier::kDevice);
    }
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(plain.BlockCount(a[i]), planned.BlockCount(b[i])) << "step " << step;
      ASSERT_EQ(plain.MappedEngineHashCount(a[i]), planned.MappedEngineHashCount(b[i]));
      ASSERT_EQ(plain.EvictedBlocks(a[i]), planned.EvictedBlocks(b[i]));
    }
    if (step % 20 == 0) {
      for (size_t i = 0; i < 3; ++i) ExpectMatchesNaive(planned, b[i], chains);
    }
  }
  EXPECT_GT(installed, 5u);
  EXPECT_GT(stale, 0u);
}

TEST(KvIndexBoundTest, AnEventLongerThanTheBoundIsEvictedBetweenItsParts) {
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, kBoundBlock);
  index.SetMaxBlocks(w, 64);
  // One chain of 1,000 blocks in parts of 16: past the bound the sweep (in steps of
  // 8 units) takes the whole chain (its kept blocks would hang below evicted ones);
  // the parts after it find their parent gone.
  std::vector<TokenId> toks(1000 * kBoundBlock);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<TokenId>(i);
  std::vector<BlockHash> engine(1000);
  for (size_t i = 0; i < engine.size(); ++i) engine[i] = i + 1;
  StoreCursor cursor;
  StoreOutcome last = StoreOutcome::kOk;
  size_t peak = 0;
  while (!cursor.done) {
    last = index.ApplyStoredPart(w, std::nullopt, engine, toks, Tier::kDevice, {}, cursor, 16);
    peak = std::max(peak, index.BlockCount(w));
    while (index.HasPendingWork(w)) ASSERT_GT(index.DoPendingWork(w, 8), 0u);
    ASSERT_LE(index.BlockCount(w), 64u);
  }
  EXPECT_EQ(last, StoreOutcome::kEvictedParent);
  EXPECT_LE(peak, 64u + 16u);  // over the bound by at most one part
  EXPECT_EQ(index.BlockCount(w), 0u);
  EXPECT_EQ(index.MappedEngineHashCount(w), 0u);
  EXPECT_TRUE(index.IsPrefixClosed(w));
}

TEST(KvIndexBoundTest, AChainRemovedRootFirstIsErasedInBoundedSteps) {
  // Removing a chain root first keeps each removed block as a kept parent row until
  // the leaf goes; the leaf's erase then cascades up the chain: 64 rows in the call,
  // the rest as pending work in steps.
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, kBoundBlock);
  const TargetId other = index.AddTarget({"other", 0}, kBoundBlock);
  index.InsertRouterHashes(other, std::vector<BlockHash>{42}, Tier::kDevice);  // rows stay
  std::vector<TokenId> toks(5000 * kBoundBlock);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<TokenId>(i % 1000);
  std::vector<BlockHash> engine(5000);
  for (size_t i = 0; i < engine.size(); ++i) engine[i] = i + 1;
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, engine, toks, Tier::kDevice), StoreOutcome::kOk);
  for (size_t at = 0; at < engine.size(); at += 100) {
    index.ApplyRemovedPart(w, std::span<const BlockHash>(engine).subspan(at, 100), Tier::kDevice);
  }
  EXPECT_EQ(index.BlockCount(w), 0u);
  EXPECT_EQ(index.DistinctHashCount(), 1u);  // kept rows are not counted
  ASSERT_TRUE(index.HasPendingWork(w));
  size_t steps = 0;
  while (index.HasPendingWork(w)) {
    ASSERT_LE(index.DoPendingWork(w, 64), 64u);
    ++steps;
  }
  EXPECT_GE(steps, 5000u / 64 - 1);
  EXPECT_EQ(index.DistinctHashCount(), 1u);
  // The chain is stored again: exact as ever.
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, engine, toks, Tier::kDevice), StoreOutcome::kOk);
  EXPECT_EQ(index.DistinctHashCount(), 5001u);
  EXPECT_EQ(index.BlockCount(w), 5000u);
}

TEST(KvIndexBoundTest, ReKeyedHashesOfTheSameBlocksStayWithinTheBound) {
  // A publisher re-sends the same blocks under ever new engine hashes: the view stays
  // at 100 blocks, the map must not grow past the bound (issue 22, item 2).
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, kBoundBlock);
  index.SetMaxBlocks(w, 1000);
  std::vector<TokenId> toks(100 * kBoundBlock);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<TokenId>(i * 3 + 1);
  const auto chain = Chain(toks);
  std::vector<BlockHash> engine(100);
  BlockHash next = 1;
  size_t peak = 0;
  for (int round = 0; round < 500; ++round) {  // 50,000 engine hashes
    for (auto& e : engine) e = next++;
    ASSERT_EQ(index.ApplyStored(w, std::nullopt, engine, toks, Tier::kDevice), StoreOutcome::kOk);
    peak = std::max(peak, index.MappedEngineHashCount(w));
    ASSERT_EQ(index.BlockCount(w), 100u);
  }
  EXPECT_LE(peak, 1000u);
  EXPECT_EQ(index.EvictedBlocks(w), 0u);  // every block is young: none leaves the view
  EXPECT_TRUE(index.IsPrefixClosed(w));
  // The youngest hashes stayed: removing through them empties the view.
  const RemoveResult r = index.ApplyRemoved(w, engine, Tier::kDevice);
  EXPECT_EQ(r.removed, 100u);
  EXPECT_EQ(index.BlockCount(w), 0u);
  EXPECT_EQ(index.MappedEngineHashCount(w), 0u);
  EXPECT_EQ(index.DistinctHashCount(), 0u);
  (void)chain;
}

TEST(KvIndexBoundTest, AliasesOfRemovedBlocksArePurgedInStepsWhileRowsMove) {
  Rng rng{43};
  KvIndex index;
  const TargetId w = index.AddTarget({"w", 0}, kBoundBlock);
  const TargetId other = index.AddTarget({"other", 0}, kBoundBlock);
  std::vector<TokenId> toks(50 * kBoundBlock);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<TokenId>(i + 7);
  std::vector<BlockHash> first(50), second(50);
  for (size_t i = 0; i < 50; ++i) {
    first[i] = 1000 + i;
    second[i] = 2000 + i;
  }
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, first, toks, Tier::kDevice), StoreOutcome::kOk);
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, second, toks, Tier::kDevice), StoreOutcome::kOk);
  EXPECT_EQ(index.MappedEngineHashCount(w), 100u);
  // The blocks go through the first hashes; the second ones name rows the target no
  // longer holds until the purge, which runs in steps while another target's inserts
  // rebuild the row table (the rows may even be reused).
  index.ApplyRemovedPart(w, first, Tier::kDevice);
  EXPECT_EQ(index.BlockCount(w), 0u);
  EXPECT_TRUE(index.HasPendingWork(w));
  // A removal through a stale alias meanwhile drops nothing.
  EXPECT_EQ(index.ApplyRemovedPart(w, std::vector<BlockHash>{2003}, Tier::kDevice).removed, 0u);
  for (int i = 0; i < 40 && index.HasPendingWork(w); ++i) {
    std::vector<BlockHash> h(64);
    for (auto& x : h) x = rng.Next() | 1;
    index.InsertRouterHashes(other, h, Tier::kDevice);
    index.DoPendingWork(w, 3);
  }
  while (index.HasPendingWork(w)) index.DoPendingWork(w, 3);
  EXPECT_EQ(index.MappedEngineHashCount(w), 0u);
  EXPECT_EQ(index.BlockCount(other), index.DistinctHashCount());
  // The target stores again: exact as ever.
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, second, toks, Tier::kDevice), StoreOutcome::kOk);
  EXPECT_EQ(index.BlockCount(w), 50u);
  EXPECT_EQ(index.MappedEngineHashCount(w), 50u);
  // When nothing at all is held any more, pending entries go with the row table.
  index.ApplyRemovedPart(w, std::vector<BlockHash>{1000}, Tier::kDevice);  // unknown now
  index.ApplyStored(w, std::nullopt, first, toks, Tier::kDevice);          // aliases again
  index.ApplyRemovedPart(w, second, Tier::kDevice);
  EXPECT_TRUE(index.HasPendingWork(w));
  index.RemoveTarget(other);  // entries == 0: the row table is freed
  EXPECT_EQ(index.DistinctHashCount(), 0u);
  while (index.HasPendingWork(w)) index.DoPendingWork(w, 5);
  EXPECT_EQ(index.MappedEngineHashCount(w), 0u);
  ASSERT_EQ(index.ApplyStored(w, std::nullopt, first, toks, Tier::kDevice), StoreOutcome::kOk);
  EXPECT_EQ(index.BlockCount(w), 50u);
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
