#include "core/selector.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/hashing.h"

namespace infera::core {
namespace {

constexpr size_t kBlock = 4;

// A fleet of named targets over one index, and a 10-block prompt.
class SelectorTest : public ::testing::Test {
 protected:
  SelectorTest() : tokens_(10 * kBlock) {
    std::iota(tokens_.begin(), tokens_.end(), 100);
    chain_ = HashChain(tokens_, kBlock);
    w0_ = index_.AddTarget({"w0:8000", 0}, kBlock);
    w1_ = index_.AddTarget({"w1:8000", 0}, kBlock);
  }

  RoutingInput Input(Role role = Role::kMixed) {
    RoutingInput in;
    in.role = role;
    in.request_id = "req-1";
    in.tokens = std::span<const TokenId>(tokens_);
    return in;
  }

  // Gives `t` `n` in-flight blocks unrelated to the prompt.
  void Busy(Selector& s, TargetId t, size_t n) {
    std::vector<BlockHash> blocks;
    for (size_t i = 0; i < n; ++i) blocks.push_back(0xB000 + t * 1000 + i);
    busy_.push_back(s.load().AddActive(t, blocks));
  }

  // Gives `t` one request prefilling `n` blocks unrelated to the prompt.
  void Prefilling(Selector& s, TargetId t, size_t n) {
    std::vector<BlockHash> blocks;
    for (size_t i = 0; i < n; ++i) blocks.push_back(0xC000 + t * 1000 + i);
    busy_.push_back(s.load().AddActive(
        t, blocks, 0, {.blocks = static_cast<double>(n), .last_block = blocks.back()}));
  }

  // The spec's worked example: W0 caches 8 of the 10 blocks and has 6 active blocks;
  // W1 is cold with 1 active block.
  void WorkedExample(Selector& s) {
    index_.InsertRouterHashes(w0_, std::span(chain_).first(8), Tier::kDevice);
    Busy(s, w0_, 6);
    Busy(s, w1_, 1);
  }

  // The spec's formula (--load-term spec): the tests of the spec's cost use it.
  PolicyConfig Config(double w = 1.0) {
    PolicyConfig c;
    c.overlap_weight = w;
    c.load_term = LoadTerm::kSpec;
    return c;
  }

  // A chain of `n` blocks unrelated to the prompt, and the tokens it hashes.
  std::vector<TokenId> OtherTokens(size_t n, TokenId base) {
    std::vector<TokenId> t(n * kBlock);
    std::iota(t.begin(), t.end(), base);
    return t;
  }

  // A selector whose LoadState outlives the fixture's guards (members are destroyed
  // in reverse order: busy_ first).
  Selector& Make(const PolicyConfig& config) {
    busy_.clear();
    selector_ = std::make_unique<Selector>(config, index_);
    return *selector_;
  }
  // Make, with W0 and W1 of 100 blocks of KV capacity each.
  Selector& MakeSized(const PolicyConfig& config) {
    Selector& s = Make(config);
    s.load().SetCapacityBlocks(w0_, 100);
    s.load().SetCapacityBlocks(w1_, 100);
    return s;
  }

  KvIndex index_;
  std::vector<TokenId> tokens_;
  std::vector<BlockHash> chain_;
  TargetId w0_, w1_;
  std::unique_ptr<Selector> selector_;
  std::vector<LoadState::ActiveGuard> busy_;
};

TEST_F(SelectorTest, SpecWorkedExample) {
  Selector& s = Make(Config(1.0));
  WorkedExample(s);
  const TargetId cands[] = {w0_, w1_};
  auto pick = s.Pick(Input(), cands);
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(pick->picked, w0_);
  EXPECT_DOUBLE_EQ(pick->costs[0], 8);
  EXPECT_DOUBLE_EQ(pick->costs[1], 11);
  EXPECT_DOUBLE_EQ(pick->cost, 8);
  ASSERT_TRUE(pick->runner_up_cost.has_value());
  EXPECT_DOUBLE_EQ(*pick->runner_up_cost, 11);
  EXPECT_EQ(pick->cache_hits, 8u);
  EXPECT_EQ(pick->request_blocks, 10u);
  EXPECT_EQ(pick->active_blocks, 6u);
  EXPECT_EQ(FormatPickLog(*pick),
            "pick policy=kv-aware role=mixed request_id=req-1 picked=w0:8000 cache_hits=8 "
            "request_blocks=10 active_blocks=6 w_overlap=1.0 mm_images=0 mm_affinity_hits=0");
  // The pick added the request's 10 blocks to W0's active set.
  EXPECT_EQ(s.load().ActiveBlocks(w0_), 16u);
}

TEST(RunnerUpCostTest, TheBestOfTheOthers) {
  const double tie[] = {7.0, 2.5, 4.0, 2.5};
  EXPECT_EQ(RunnerUpCost(tie, 2.5), 2.5);  // a tie: the runner-up costs the same
  const double apart[] = {7.0, 2.5, 4.0};
  EXPECT_EQ(RunnerUpCost(apart, 2.5), 4.0);
  const double one[] = {2.5};
  EXPECT_FALSE(RunnerUpCost(one, 2.5).has_value());  // one candidate
  EXPECT_FALSE(RunnerUpCost({}, 0).has_value());      // round-robin, random, least-load
}

TEST_F(SelectorTest, RaisingTheWeightWidensTheMargin) {
  Selector& s = Make(Config(3.0));
  WorkedExample(s);
  const TargetId cands[] = {w0_, w1_};
  auto pick = s.Pick(Input(), cands);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(pick->picked, w0_);
  EXPECT_DOUBLE_EQ(pick->costs[0], 3.0 * 2 + 6);
  EXPECT_DOUBLE_EQ(pick->costs[1], 3.0 * 10 + 1);
  EXPECT_GT(pick->costs[1] - pick->costs[0], 11.0 - 8.0);
}

TEST_F(SelectorTest, ZeroWeightIsPureLoad) {
  Selector& s = Make(Config(0.0));
  WorkedExample(s);
  const TargetId cands[] = {w0_, w1_};
  auto pick = s.Pick(Input(), cands);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(pick->picked, w1_);
  EXPECT_DOUBLE_EQ(pick->costs[0], 6);
  EXPECT_DOUBLE_EQ(pick->costs[1], 1);
  EXPECT_EQ(pick->w_overlap, 0.0);
  EXPECT_NE(FormatPickLog(*pick).find(" w_overlap=0.0 "), std::string::npos);
}

TEST_F(SelectorTest, PerRoleWeightsOverrideAndFallBack) {
  PolicyConfig c = Config(1.0);
  c.prefill_overlap_weight = 20.0;
  EXPECT_EQ(c.OverlapWeight(Role::kPrefill), 20.0);
  EXPECT_EQ(c.OverlapWeight(Role::kDecode), 1.0);  // unset: the global weight
  EXPECT_EQ(c.OverlapWeight(Role::kMixed), 1.0);
  c.decode_overlap_weight = 0.5;
  EXPECT_EQ(c.OverlapWeight(Role::kDecode), 0.5);

  Selector& s = Make(c);
  WorkedExample(s);
  const TargetId cands[] = {w0_, w1_};
  auto prefill = s.Pick(Input(Role::kPrefill), cands);
  ASSERT_TRUE(prefill.ok());
  EXPECT_EQ(prefill->w_overlap, 20.0);
  EXPECT_DOUBLE_EQ(prefill->costs[1], 20.0 * 10 + 1);
  EXPECT_EQ(FormatPickLog(*prefill).substr(0, 31), "pick policy=kv-aware role=prefi");
  EXPECT_NE(FormatPickLog(*prefill).find(" w_overlap=20.0 "), std::string::npos);
  auto decode = s.Pick(Input(Role::kDecode), cands);
  ASSERT_TRUE(decode.ok());
  EXPECT_EQ(decode->w_overlap, 0.5);
  EXPECT_NE(FormatPickLog(*decode).find(" role=decode "), std::string::npos);
}

TEST_F(SelectorTest, TieGoesToLowerLoadThenRotates) {
  PolicyConfig c = Config(1.0);
  c.recent_decay = 0;  // keep loads exactly as set between picks
  Selector& s = Make(c);
  // W0: 4 hits, no load -> 6 + 0. W1: 6 hits, 2 active -> 4 + 2. Equal cost 6.
  index_.InsertRouterHashes(w0_, std::span(chain_).first(4), Tier::kDevice);
  index_.InsertRouterHashes(w1_, std::span(chain_).first(6), Tier::kDevice);
  Busy(s, w1_, 2);
  const TargetId w1_first[] = {w1_, w0_};
  for (int i = 0; i < 2; ++i) {  // whatever the scan start
    auto pick = s.Pick(Input(), w1_first);
    ASSERT_TRUE(pick.ok());
    EXPECT_DOUBLE_EQ(pick->costs[0], pick->costs[1]);
    EXPECT_EQ(pick->picked, w0_);  // lower load, although listed second
  }

  // Equal cost and equal load: ties rotate, never to a fixed position.
  const TargetId w2 = index_.AddTarget({"w2:8000", 0}, kBlock);
  const TargetId w3 = index_.AddTarget({"w3:8000", 0}, kBlock);
  const TargetId w4 = index_.AddTarget({"w4:8000", 0}, kBlock);
  const TargetId order[] = {w2, w3, w4};
  std::map<TargetId, int> picks;
  for (int i = 0; i < 30; ++i) {
    auto pick = s.Pick(Input(), order);
    ASSERT_TRUE(pick.ok());
    ++picks[pick->picked];
  }  // each guard is released at once: every pick is a tie
  EXPECT_EQ(picks, (std::map<TargetId, int>{{w2, 10}, {w3, 10}, {w4, 10}}));
}

// A PD request is two picks, prefill then decode: with pools of two and every cost tied
// (an idle fleet), each pool still alternates (one shared turn sent every request to
// the same pair).
TEST_F(SelectorTest, TiesRotatePerRoleWhenPrefillAndDecodePicksAlternate) {
  PolicyConfig c = Config(1.0);
  c.recent_decay = 0;  // no recent charge left behind: every pick is a tie
  Selector& s = Make(c);
  const TargetId p0 = index_.AddTarget({"p0:8000", 0}, kBlock);
  const TargetId p1 = index_.AddTarget({"p1:8000", 0}, kBlock);
  const TargetId prefill[] = {p0, p1};
  const TargetId decode[] = {w0_, w1_};
  std::map<TargetId, int> picks;
  for (int i = 0; i < 8; ++i) {
    for (auto [role, pool] : {std::pair{Role::kPrefill, std::span<const TargetId>(prefill)},
                              std::pair{Role::kDecode, std::span<const TargetId>(decode)}}) {
      auto pick = s.Pick(Input(role), pool);
      ASSERT_TRUE(pick.ok());
      ++picks[pick->picked];
    }  // each guard is released at once: every pick is a tie
  }
  EXPECT_EQ(picks, (std::map<TargetId, int>{{p0, 4}, {p1, 4}, {w0_, 4}, {w1_, 4}}));
}

TEST_F(SelectorTest, LeastLoadTiesRotate) {
  PolicyConfig c;
  c.policy = Policy::kLeastLoad;
  Selector& s = Make(c);
  std::vector<TargetId> fleet;
  for (int i = 0; i < 16; ++i) fleet.push_back(index_.AddTarget({absl::StrCat("e", i), 0}, kBlock));
  std::map<TargetId, int> picks;
  for (int i = 0; i < 160; ++i) {
    auto pick = s.Pick(Input(), fleet);
    ASSERT_TRUE(pick.ok());
    ++picks[pick->picked];
  }
  ASSERT_EQ(picks.size(), 16u);
  for (auto [t, n] : picks) EXPECT_EQ(n, 10) << t;
}

TEST_F(SelectorTest, LowerTierHitsEarnPartialCredit) {
  index_.InsertRouterHashes(w0_, std::span(chain_).first(8), Tier::kHost);
  index_.InsertRouterHashes(w1_, std::span(chain_).first(7), Tier::kDevice);
  const TargetId cands[] = {w0_, w1_};
  {
    Selector& s = Make(Config(1.0));  // host hit = 0.75 of a device hit
    auto pick = s.Pick(Input(), cands);
    ASSERT_TRUE(pick.ok());
    EXPECT_DOUBLE_EQ(pick->costs[0], 10 - 0.75 * 8);  // 4
    EXPECT_DOUBLE_EQ(pick->costs[1], 10 - 7);         // 3
    EXPECT_EQ(pick->picked, w1_);
  }
  {
    PolicyConfig c = Config(1.0);
    c.host_hit_weight = 1.0;  // host as good as device: W0's 8 hits win
    Selector& s = Make(c);
    auto pick = s.Pick(Input(), cands);
    ASSERT_TRUE(pick.ok());
    EXPECT_EQ(pick->picked, w0_);
    EXPECT_EQ(pick->hits.host_hits, 8u);
    EXPECT_EQ(pick->cache_hits, 8u);
  }
  {
    PolicyConfig c = Config(1.0);
    Selector& s = Make(c);
    index_.InsertRouterHashes(w0_, std::span(chain_).first(8), Tier::kDisk);
    index_.RemoveRouterHashes(w0_, std::span(chain_).first(8), Tier::kHost);
    auto pick = s.Pick(Input(), cands);
    ASSERT_TRUE(pick.ok());
    EXPECT_DOUBLE_EQ(pick->costs[0], 10 - 0.25 * 8);
  }
}

TEST_F(SelectorTest, WithoutTokensThereIsNoCacheTerm) {
  Selector& s = Make(Config(1.0));
  WorkedExample(s);
  RoutingInput in;
  in.request_id = "r";
  in.estimated_tokens = 10 * kBlock + 3;
  const TargetId cands[] = {w0_, w1_};
  auto pick = s.Pick(in, cands);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(pick->w_overlap, 0.0);
  EXPECT_EQ(pick->picked, w1_);  // only load counts: 6 vs 1
  EXPECT_EQ(pick->cache_hits, 0u);
  EXPECT_EQ(pick->request_blocks, 10u);
  EXPECT_EQ(s.load().ActiveBlocks(w1_), 11u);  // estimate's blocks are in flight
  pick->guard.Release();
  EXPECT_EQ(s.load().ActiveBlocks(w1_), 1u);
}

TEST_F(SelectorTest, HashesOncePerBlockSize) {
  const TargetId w8 = index_.AddTarget({"w8:8000", 0}, 2 * kBlock);
  index_.InsertRouterHashes(w0_, std::span(chain_).first(3), Tier::kDevice);
  const auto chain8 = HashChain(tokens_, 2 * kBlock);  // 5 blocks of 8
  index_.InsertRouterHashes(w8, std::span(chain8).first(4), Tier::kDevice);
  PolicyConfig c = Config(1.0);
  Selector& s = Make(c);
  const TargetId cands[] = {w0_, w8, w1_};
  auto pick = s.Pick(Input(), cands);
  ASSERT_TRUE(pick.ok());
  EXPECT_DOUBLE_EQ(pick->costs[0], 10 - 3);
  EXPECT_DOUBLE_EQ(pick->costs[1], 5 - 4);
  EXPECT_DOUBLE_EQ(pick->costs[2], 10);
  EXPECT_EQ(pick->picked, w8);
  EXPECT_EQ(pick->request_blocks, 5u);
  EXPECT_EQ(pick->cache_hits, 4u);
  EXPECT_EQ(s.load().ActiveBlocks(w8), 5u);
}

TEST_F(SelectorTest, GuardReleasedExactlyOnceOnEveryPath) {
  for (Policy p : {Policy::kKvAware, Policy::kRoundRobin, Policy::kRandom, Policy::kLeastLoad}) {
    SCOPED_TRACE(PolicyName(p));
    PolicyConfig c = Config(1.0);
    c.policy = p;
    Selector& s = Make(c);
    const TargetId cands[] = {w0_, w1_};
    // Completion: explicit release, then the destructor does nothing more.
    {
      auto pick = s.Pick(Input(), cands);
      ASSERT_TRUE(pick.ok());
      EXPECT_EQ(s.load().ActiveBlocks(pick->picked), 10u);
      pick->guard.Release();
      pick->guard.Release();
      EXPECT_EQ(s.load().ActiveBlocks(pick->picked), 0u);
    }
    EXPECT_EQ(s.load().PendingGuards(), 0u);
    // Abandoned pick: the result is dropped unreleased.
    { ASSERT_TRUE(s.Pick(Input(), cands).ok()); }
    EXPECT_EQ(s.load().PendingGuards(), 0u);
    // Hand-off: the guard moves into the request's state (e.g. a PD response guard).
    LoadState::ActiveGuard moved;
    TargetId picked;
    {
      auto pick = s.Pick(Input(), cands);
      ASSERT_TRUE(pick.ok());
      picked = pick->picked;
      moved = std::move(pick->guard);
    }
    EXPECT_EQ(s.load().ActiveBlocks(picked), 10u);
    // Failure after the target left: RemoveTarget drops the load, the late release
    // is a no-op, and a new target on the same id is not affected.
    s.RemoveTarget(picked);
    Busy(s, picked, 3);
    moved.Release();
    EXPECT_EQ(s.load().ActiveBlocks(picked), 3u);
    busy_.clear();
    EXPECT_EQ(s.load().PendingGuards(), 0u);
  }
}

TEST_F(SelectorTest, RoundRobinRotatesPerCandidateSet) {
  PolicyConfig c;
  c.policy = Policy::kRoundRobin;
  Selector& s = Make(c);
  const TargetId a = w0_, b = w1_;
  const TargetId p = index_.AddTarget({"p:1", 0}, kBlock);
  const TargetId d1 = index_.AddTarget({"d1:1", 0}, kBlock);
  const TargetId d2 = index_.AddTarget({"d2:1", 0}, kBlock);
  const TargetId prefill_pool[] = {a, b, p};
  const TargetId decode_pool[] = {d1, d2};
  std::vector<TargetId> prefill_picks, decode_picks;
  for (int i = 0; i < 4; ++i) {
    auto pp = s.Pick(Input(Role::kPrefill), prefill_pool);
    auto dp = s.Pick(Input(Role::kDecode), decode_pool);
    ASSERT_TRUE(pp.ok() && dp.ok());
    prefill_picks.push_back(pp->picked);
    decode_picks.push_back(dp->picked);
  }
  EXPECT_EQ(prefill_picks, (std::vector<TargetId>{a, b, p, a}));
  EXPECT_EQ(decode_picks, (std::vector<TargetId>{d1, d2, d1, d2}));
  auto pick = s.Pick(Input(Role::kDecode), decode_pool);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(FormatPickLog(*pick), "pick policy=round-robin role=decode picked=d1:1");
  // A target leaving resets the rotations that included it.
  s.RemoveTarget(d2);
  index_.RemoveTarget(d2);
}

TEST_F(SelectorTest, RandomIsSeededAndCoversCandidates) {
  PolicyConfig c;
  c.policy = Policy::kRandom;
  c.random_seed = 42;
  Selector s1(c, index_), s2(c, index_);
  const TargetId cands[] = {w0_, w1_};
  std::set<TargetId> seen;
  for (int i = 0; i < 64; ++i) {
    auto x = s1.Pick(Input(), cands);
    auto y = s2.Pick(Input(), cands);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->picked, y->picked);
    seen.insert(x->picked);
  }
  EXPECT_EQ(seen.size(), 2u);
}

TEST_F(SelectorTest, LeastLoadPicksLowestLoad) {
  PolicyConfig c = Config();
  c.policy = Policy::kLeastLoad;
  Selector& s = Make(c);
  index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);  // cache is ignored
  Busy(s, w0_, 2);
  Busy(s, w1_, 1);
  const TargetId cands[] = {w0_, w1_};
  auto pick = s.Pick(Input(), cands);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(pick->picked, w1_);
  EXPECT_DOUBLE_EQ(pick->cost, 1);
  EXPECT_EQ(FormatPickLog(*pick).substr(0, 40), "pick policy=least-load role=mixed reques");
  // Now w1 has 11 blocks: w0 (2) is least loaded.
  auto next = s.Pick(Input(), cands);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->picked, w0_);
}

TEST_F(SelectorTest, ImagesRouteByAffinityNotTextOverlap) {
  Selector& s = Make(Config(1.0));
  // W1 caches the text: it must not matter for an image request.
  index_.InsertRouterHashes(w1_, chain_, Tier::kDevice);
  const std::vector<uint64_t> cat = {ImageKey("https://x/cat.png")};
  RoutingInput in = Input(Role::kPrefill);
  in.image_keys = cat;
  const TargetId cands[] = {w0_, w1_};
  auto first = s.Pick(in, cands);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->w_overlap, 0.0);
  EXPECT_EQ(first->picked, w0_);  // no affinity anywhere: load tie, candidate order
  EXPECT_EQ(first->mm_images, 1u);
  EXPECT_EQ(first->mm_affinity_hits, 0u);
  // While the first is in flight, W0 is busier, but w_mm = 48 draws the image back.
  auto second = s.Pick(in, cands);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->picked, w0_);
  EXPECT_EQ(second->mm_affinity_hits, 1u);
  EXPECT_DOUBLE_EQ(second->costs[1] - s.load().RecentBlocks(w1_), 48.0);
  EXPECT_NE(FormatPickLog(*second).find("picked=w0:8000 cache_hits=0 request_blocks=10 "
                                        "active_blocks=10 w_overlap=0.0 mm_images=1 "
                                        "mm_affinity_hits=1"),
            std::string::npos)
      << FormatPickLog(*second);
  // A decode pick of the same request routes by load alone and records nothing.
  RoutingInput dec = in;
  dec.role = Role::kDecode;
  auto d = s.Pick(dec, cands);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->picked, w1_);  // W0 has 10 active blocks, W1 none
  EXPECT_EQ(d->mm_affinity_hits, 0u);
  EXPECT_FALSE(s.images().Holds(w1_, cat[0]));
}

TEST_F(SelectorTest, RecentBlocksSpreadSerialTrafficUntilTheEventsConfirmThem) {
  PolicyConfig c = Config(1.0);
  c.recent_decay = 0.5;
  Selector& s = Make(c);
  const TargetId cands[] = {w0_, w1_};
  auto first = s.Pick(Input(), cands);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->picked, w0_);
  first->guard.Release();
  // W0 missed all 10 blocks: it is charged 10 recent blocks, so the next identical
  // cold request (no cache events arrived) goes to W1; the decay comes first.
  EXPECT_DOUBLE_EQ(s.load().RecentBlocks(w0_), 10);
  auto second = s.Pick(Input(), cands);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->picked, w1_);
  EXPECT_DOUBLE_EQ(second->costs[0], 10 + 5);
  EXPECT_DOUBLE_EQ(s.load().RecentBlocks(w0_), 5);
  second->guard.Release();
  // W0's events arrive: the blocks its charge stood for are confirmed, so they count
  // once (as hits), not also as load. W1's charge is not confirmed and stays.
  index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);
  auto third = s.Pick(Input(), cands);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->picked, w0_);
  EXPECT_DOUBLE_EQ(third->costs[0], 0);
  EXPECT_DOUBLE_EQ(third->costs[1], 10 + 5);
  EXPECT_DOUBLE_EQ(s.load().RecentBlocks(w1_), 5);
}

TEST_F(SelectorTest, DecayedChargesAreDropped) {
  PolicyConfig c = Config(1.0);
  c.recent_decay = 0.5;
  Selector& s = Make(c);
  const TargetId only_w0[] = {w0_};
  const TargetId only_w1[] = {w1_};
  ASSERT_TRUE(s.Pick(Input(), only_w0).ok());
  // 11 picks elsewhere halve W0's 10 blocks to 0.005 (decay is global) ...
  for (int i = 0; i < 11; ++i) ASSERT_TRUE(s.Pick(Input(), only_w1).ok());
  // ... and W0's next pick drops the negligible charge before it is charged 10 anew.
  ASSERT_TRUE(s.Pick(Input(), only_w0).ok());
  EXPECT_DOUBLE_EQ(s.load().RecentBlocks(w0_), 10);
}

// ---- The default load term (--load-term work) ----

TEST_F(SelectorTest, DefaultSerialRepeatGoesBackToTheWarmTarget) {
  // The case: an identical request after the first completed. Its blocks are
  // confirmed by the events on W0; nothing is in flight. The repeat must hit.
  Selector& s = Make(PolicyConfig{});
  const TargetId cands[] = {w0_, w1_};
  auto first = s.Pick(Input(), cands);
  ASSERT_TRUE(first.ok());
  const TargetId warm = first->picked;
  index_.InsertRouterHashes(warm, chain_, Tier::kDevice);  // the engine's events
  first->guard.Release();
  for (int i = 0; i < 4; ++i) {  // whatever the tie rotation's position
    auto again = s.Pick(Input(), cands);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->picked, warm);
    EXPECT_EQ(again->cache_hits, 10u);
  }
}

TEST_F(SelectorTest, DefaultRemotePendingPrefillSendsTheWarmRepeatElsewhere) {
  // --router-replica-sync: the prompt is cached on W0, where another replica has 30
  // blocks of prefill pending. Locally W0 wins (0 misses + 0 load against 10 misses);
  // with the other replica's load it costs 30 and cold W1 (10) wins.
  Selector& s = Make(PolicyConfig{});
  index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);
  const TargetId cands[] = {w0_, w1_};
  auto local = s.Pick(Input(), cands);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->picked, w0_);
  local->guard.Release();
  s.load().SetRemote(w0_, /*active_blocks=*/0, /*pending_prefill_blocks=*/30);
  auto shared = s.Pick(Input(), cands);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->picked, w1_);
  EXPECT_DOUBLE_EQ(shared->costs[0], 30);
  EXPECT_DOUBLE_EQ(shared->costs[1], 10);
  EXPECT_DOUBLE_EQ(s.load().PendingPrefillBlocks(w0_), 0);  // its own stays its own
}

TEST_F(SelectorTest, DefaultPendingPrefillIsSettledByEventsOrFirstToken) {
  Selector& s = Make(PolicyConfig{});
  const TargetId only_w0[] = {w0_};
  auto a = s.Pick(Input(), only_w0);  // 10 uncached blocks to compute on W0
  ASSERT_TRUE(a.ok());
  EXPECT_DOUBLE_EQ(s.load().PendingPrefillBlocks(w0_), 10);
  EXPECT_DOUBLE_EQ(s.load().Load(w0_), 10);
  // A different prompt: W0 (10 misses + 10 pending, scaled by 1 + 0.5: one request in
  // prefill over the two candidates) loses to cold W1 (10 misses).
  const std::vector<TokenId> other = OtherTokens(10, 5000);
  RoutingInput in = Input();
  in.tokens = std::span<const TokenId>(other);
  const TargetId cands[] = {w0_, w1_};
  auto b = s.Pick(in, cands);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->picked, w1_);
  EXPECT_DOUBLE_EQ(b->costs[0], 10 + 10 / 1.5);
  EXPECT_DOUBLE_EQ(b->costs[1], 10);
  // W0's events confirm a's last block: a's prefill is done; its blocks stay active.
  index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);
  auto c = s.Pick(in, only_w0);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->load, 0);
  EXPECT_EQ(s.load().ActiveBlocks(w0_), 20u);
  // b's first token (PrefillDone) settles W1 without events; idempotent.
  EXPECT_DOUBLE_EQ(s.load().PendingPrefillBlocks(w1_), 10);
  b->guard.PrefillDone();
  b->guard.PrefillDone();
  EXPECT_DOUBLE_EQ(s.load().PendingPrefillBlocks(w1_), 0);
  EXPECT_EQ(s.load().ActiveBlocks(w1_), 10u);
  b->guard.Release();
  EXPECT_EQ(s.load().ActiveBlocks(w1_), 0u);
  // Release settles a pending prefill too (a request that failed before its token).
  EXPECT_DOUBLE_EQ(s.load().PendingPrefillBlocks(w0_), 10);  // c's
  c->guard.Release();
  EXPECT_DOUBLE_EQ(s.load().PendingPrefillBlocks(w0_), 0);
}

TEST_F(SelectorTest, DefaultKvPressureIsSteepPastTheThreshold) {
  Selector& s = MakeSized(PolicyConfig{});
  // W0 caches the prompt but holds 85 in-flight blocks (decoding: no pending
  // prefill). With this request's 10 it would be at 95 %: 15 blocks past 80 % cost
  // 1 each (the default slope) = 15, more than W1's 10 misses.
  index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);
  Busy(s, w0_, 85);
  const TargetId cands[] = {w0_, w1_};
  auto p = s.Pick(Input(), cands);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->costs[0], 0 + 1.0 * 15);
  EXPECT_DOUBLE_EQ(p->costs[1], 10);
  EXPECT_EQ(p->picked, w1_);
  p->guard.Release();
  // At 70 active blocks (80 % with this request) there is no pressure: W0 hits.
  busy_.clear();
  Busy(s, w0_, 70);
  auto q = s.Pick(Input(), cands);
  ASSERT_TRUE(q.ok());
  EXPECT_DOUBLE_EQ(q->costs[0], 0);
  EXPECT_EQ(q->picked, w0_);
}

// --kv-pressure-yield (off by default): when every candidate would be past its threshold,
// a mixed or prefill pick drops the pressure term (it could only send the request off
// its cache); a decode pick keeps it. W0 caches the prompt at 95 + 10 of 100 blocks
// (25 past 80 %), cold W1 at 75 + 10 (5 past): with the term W1 wins 10 + 5 < 25.
TEST_F(SelectorTest, KvPressureYieldsWhenEveryCandidateIsPressed) {
  for (bool yield : {true, false}) {
    PolicyConfig c;
    c.kv_pressure_yield = yield;
    Selector& s = MakeSized(c);
    index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);
    busy_.clear();
    Busy(s, w0_, 95);
    Busy(s, w1_, 75);
    const TargetId cands[] = {w0_, w1_};
    auto p = s.Pick(Input(), cands);
    ASSERT_TRUE(p.ok());
    EXPECT_DOUBLE_EQ(p->costs[0], yield ? 0 : 25) << yield;
    EXPECT_DOUBLE_EQ(p->costs[1], yield ? 10 : 15) << yield;
    EXPECT_EQ(p->picked, yield ? w0_ : w1_) << yield;
    p->guard.Release();
    // One candidate with room (W1 at 60 + 10): the term stays, and sends W1 the request.
    busy_.clear();
    Busy(s, w0_, 95);
    Busy(s, w1_, 60);
    auto q = s.Pick(Input(), cands);
    ASSERT_TRUE(q.ok());
    EXPECT_DOUBLE_EQ(q->costs[0], 25);
    EXPECT_EQ(q->picked, w1_);
    q->guard.Release();
    // A decode pick keeps the term with every candidate pressed.
    busy_.clear();
    Busy(s, w0_, 95);
    Busy(s, w1_, 75);
    RoutingInput in = Input();
    in.role = Role::kDecode;
    auto d = s.Pick(in, cands);
    ASSERT_TRUE(d.ok());
    EXPECT_DOUBLE_EQ(d->costs[0], 25);
    EXPECT_DOUBLE_EQ(d->costs[1], d->w_overlap * 10 + 5);
    d->guard.Release();
  }
}

// The load term is divided by 1 + the candidates' mean requests in prefill: with 2
// requests prefilling on W0 and none on W1 the mean is 1, so W0's 20 blocks of pending
// prefill cost 10 — against W1's 10 misses, a tie that goes to the lower load (W1);
// unscaled, 20 > 10. With one request left (mean 0.5) W0's 10 blocks cost 6.7 < 10 and
// the warm W0 wins; unscaled it is a tie again and the cold W1 wins it.
TEST_F(SelectorTest, LoadIsScaledByTheRequestsInPrefill) {
  for (bool scaling : {true, false}) {
    PolicyConfig c;
    c.load_queue_scaling = scaling;
    Selector& s = Make(c);
    index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);
    std::vector<LoadState::ActiveGuard> held;
    PendingPrefill ten;
    ten.blocks = 10;
    for (int i = 0; i < 2; ++i) held.push_back(s.load().AddActive(w0_, {}, 1, ten));
    const TargetId cands[] = {w0_, w1_};
    auto p = s.Pick(Input(), cands);
    ASSERT_TRUE(p.ok());
    EXPECT_DOUBLE_EQ(p->costs[0], scaling ? 20.0 / 2 : 20.0);
    EXPECT_DOUBLE_EQ(p->costs[1], 10);
    EXPECT_EQ(p->picked, w1_);
    p->guard.Release();
    held.pop_back();  // one left: mean 0.5, 10 / 1.5 < 10 misses: W0 hits
    auto q = s.Pick(Input(), cands);
    ASSERT_TRUE(q.ok());
    EXPECT_DOUBLE_EQ(q->costs[0], scaling ? 10.0 / 1.5 : 10.0);
    EXPECT_EQ(q->picked, scaling ? w0_ : w1_);
    q->guard.Release();
    index_.RemoveRouterHashes(w0_, chain_, Tier::kDevice);
  }
}

// --kv-decode-load (off by default): both targets hold the prompt and have nothing to
// prefill, so the hits and the pending prefill tie; W0 runs 3 decoding requests of 20
// prompt blocks each (60 of its 100 blocks), W1 one (20). Off, the tie goes to the fewer
// in-flight blocks (W1 too, but only as a tie-break); on (50 blocks at a full KV), W0
// costs 50 × 0.6 = 30 and W1 50 × 0.2 = 10: the lighter decode batch wins on cost, and
// outweighs a 15-block miss (cold W1 still wins when W0's batch is heavier by more).
TEST_F(SelectorTest, DecodeLoadSendsTheRequestToTheLighterDecodeBatch) {
  for (double decode_load : {0.0, 50.0}) {
    PolicyConfig c;
    c.decode_load_blocks = decode_load;
    Selector& s = MakeSized(c);
    index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);
    index_.InsertRouterHashes(w1_, chain_, Tier::kDevice);
    // Decoding requests: the hot prompt plus their own 10 blocks (past their prefill).
    std::vector<LoadState::ActiveGuard> decoding;
    auto add = [&](TargetId t, BlockHash base) {
      std::vector<BlockHash> blocks = chain_;
      for (BlockHash i = 0; i < 10; ++i) blocks.push_back(base + i);
      decoding.push_back(s.load().AddActive(t, blocks));
    };
    for (BlockHash r = 0; r < 3; ++r) add(w0_, 0xD000 + 100 * r);
    add(w1_, 0xE000);
    EXPECT_EQ(s.load().RequestBlocks(w0_), 60u);  // the shared prompt counts per request
    EXPECT_EQ(s.load().ActiveBlocks(w0_), 40u);
    const TargetId cands[] = {w0_, w1_};
    auto p = s.Pick(Input(), cands);
    ASSERT_TRUE(p.ok());
    EXPECT_DOUBLE_EQ(p->costs[0], decode_load * 0.6);
    EXPECT_DOUBLE_EQ(p->costs[1], decode_load * 0.2);
    EXPECT_EQ(p->picked, w1_);
    p->guard.Release();
    // W1 forgets the prompt's last 5 blocks: a 5-block miss, of which W1's in-flight
    // request holds all 5 (the default in-flight credit, 0.5 × 5), so cost 2.5 + its
    // decode load. Off, the warm W0 wins on cost; on, W1's lighter batch (10) and 2.5
    // misses (12.5) beat W0's heavier one (30).
    index_.RemoveRouterHashes(w1_, std::span(chain_).last(5), Tier::kDevice);
    auto q = s.Pick(Input(), cands);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->inflight_hits, q->picked == w1_ ? 5u : 0u);
    EXPECT_DOUBLE_EQ(q->costs[1], 5 - 0.5 * 5 + decode_load * 0.2);
    EXPECT_EQ(q->picked, decode_load > 0 ? w1_ : w0_);
    q->guard.Release();
    index_.RemoveRouterHashes(w0_, chain_, Tier::kDevice);
    index_.RemoveRouterHashes(w1_, std::span(chain_).first(5), Tier::kDevice);
  }
}

// --kv-inflight-credit (0.5 by default, 0 and 0.5 here): a prompt cold everywhere is being computed on
// W0 (its first request, 10 blocks pending); W1 has a 4-block prefill of its own. The
// discount is 1 + (1 + 1) / 2 = 2. Off, a duplicate costs W0 10 + 10 / 2 = 15 and W1
// 10 + 4 / 2 = 12: W1 computes the prompt a second time. With weight 0.5 W0's in-flight
// run (the whole prompt) is credited 5 blocks: 10 − 5 + 5 = 10 < 12, so the duplicate
// follows the first and its pending prefill is the 5 blocks not credited. A third one
// finds two holders on W0: with a limit of 2 there is no credit (10 + 15 / 2.5
// = 16 against 10 + 4 / 2.5 = 11.6, W1); with a limit of 3 (the default is 8) there is (11 <
// 11.6, W0). The share gate (window 32) is open: the prompt is 2 of 2 picks × 2
// candidates ≤ 32.
TEST_F(SelectorTest, InflightCreditSendsADuplicateToTheEngineComputingIt) {
  for (uint32_t holders : {0u, 2u, 3u}) {  // 0: the credit off
    PolicyConfig c;
    c.inflight_credit = holders == 0 ? 0.0 : 0.5;
    c.inflight_credit_holders = holders == 0 ? 2 : holders;
    Selector& s = Make(c);
    std::vector<LoadState::ActiveGuard> held;
    held.push_back(s.load().AddActive(w0_, chain_, 0, {.blocks = 10, .last_block = chain_.back()}));
    Prefilling(s, w1_, 4);
    const TargetId cands[] = {w0_, w1_};
    auto p = s.Pick(Input(), cands);
    ASSERT_TRUE(p.ok());
    EXPECT_DOUBLE_EQ(p->costs[0], holders == 0 ? 15.0 : 10.0);
    EXPECT_DOUBLE_EQ(p->costs[1], 12.0);
    if (holders == 0) {
      EXPECT_EQ(p->picked, w1_);
      EXPECT_EQ(p->inflight_hits, 0u);
      continue;
    }
    EXPECT_EQ(p->picked, w0_);
    EXPECT_EQ(p->cache_hits, 0u);  // the view holds nothing yet
    EXPECT_EQ(p->inflight_hits, 10u);
    EXPECT_DOUBLE_EQ(p->credited, 5.0);
    EXPECT_DOUBLE_EQ(s.load().PendingPrefillBlocks(w0_), 15.0);
    EXPECT_EQ(s.load().ActiveHolders(w0_, chain_.front()), 2u);
    held.push_back(std::move(p->guard));
    auto q = s.Pick(Input(), cands);
    ASSERT_TRUE(q.ok());
    EXPECT_DOUBLE_EQ(q->costs[0], holders == 2 ? 16.0 : 11.0);
    EXPECT_DOUBLE_EQ(q->costs[1], 10 + 4 / 2.5);
    EXPECT_EQ(q->picked, holders == 2 ? w1_ : w0_);
    q->guard.Release();
  }
}

// The admission queue's hold rule (doc/admission.md "Hold rule"), thresholds 100 and
// join 8: W0 computing the 10-block prompt (10 blocks pending), W1 a 9-block prefill of
// its own. The least pending prefill (9) is past the join threshold, under the other.
// Held: a cold prompt that what W0 computes would make half cached, once the share
// gate has a window of picks (default 32) in which the prompt is a small share.
TEST_F(SelectorTest, AdviseHoldJoinsAColdPromptAnotherRequestIsComputing) {
  using Hold = Selector::Hold;
  Selector& s = Make(PolicyConfig{});
  const TargetId cands[] = {w0_, w1_};
  EXPECT_EQ(s.AdviseHold(Input(), cands, 100, 8, false), Hold::kOffer);  // idle fleet
  // 32 picks of other prompts fill the share window (each released at once).
  std::vector<std::vector<TokenId>> others;
  for (int k = 0; k < 32; ++k) others.push_back(OtherTokens(10, 20000 + 100 * k));
  auto pick_each = [&](const std::vector<TokenId>& tokens) {
    RoutingInput in = Input();
    in.tokens = std::span<const TokenId>(tokens);
    auto p = s.Pick(in, cands);
    ASSERT_TRUE(p.ok());
    p->guard.Release();
  };
  auto computing = s.load().AddActive(w0_, chain_, 0, {.blocks = 10, .last_block = chain_.back()});
  Prefilling(s, w1_, 9);
  EXPECT_DOUBLE_EQ(s.MinLoad(cands), 9.0);
  // Before the window is full no share is measured: never held.
  EXPECT_EQ(s.AdviseHold(Input(), cands, 100, 8, false), Hold::kOffer);
  for (const auto& t : others) pick_each(t);
  // Cold everywhere, W0 computing it: held (it binds once W0 has it).
  EXPECT_EQ(s.AdviseHold(Input(), cands, 100, 8, false), Hold::kWait);
  // A cold prompt nobody computes: waiting would not make it cheaper.
  const std::vector<TokenId> other = OtherTokens(10, 5000);
  RoutingInput cold = Input();
  cold.tokens = std::span<const TokenId>(other);
  EXPECT_EQ(s.AdviseHold(cold, cands, 100, 8, false), Hold::kOffer);
  // Nor one that shares only its first block with the copy in flight (a system prompt
  // every request has): no copy would make it half cached.
  std::vector<TokenId> same_start = OtherTokens(10, 7000);
  std::copy(tokens_.begin(), tokens_.begin() + kBlock, same_start.begin());
  RoutingInput shared_first = Input();
  shared_first.tokens = std::span<const TokenId>(same_start);
  EXPECT_EQ(s.AdviseHold(shared_first, cands, 100, 8, false), Hold::kOffer);
  // The join hold off (0): only the first threshold holds, as before it existed.
  EXPECT_EQ(s.AdviseHold(Input(), cands, 100, 0, false), Hold::kOffer);
  EXPECT_EQ(s.AdviseHold(Input(), cands, 9, 0, false), Hold::kWait);
  EXPECT_EQ(s.AdviseHold(Input(), cands, 10, 0, false), Hold::kOffer);
  // A prompt that became half the recent picks (16 of 32 with 2 candidates: 17 x 2 > 32
  // with this one) needs homes, not a copy to join: offered again.
  for (int k = 0; k < 15; ++k) pick_each(tokens_);
  EXPECT_EQ(s.AdviseHold(Input(), cands, 100, 8, false), Hold::kWait);  // 16 x 2 <= 32
  pick_each(tokens_);
  EXPECT_EQ(s.AdviseHold(Input(), cands, 100, 8, false), Hold::kOffer);
  // Half the prompt cached on W1: it binds now, past requests that wait...
  index_.InsertRouterHashes(w1_, std::span(chain_).first(5), Tier::kDevice);
  EXPECT_EQ(s.AdviseHold(Input(), cands, 100, 8, true), Hold::kBypass);
  EXPECT_EQ(s.AdviseHold(Input(), cands, 100, 8, false), Hold::kBypass);
  // (Not when W1 renders the prompt differently: its blocks are credited nothing, and
  // the prompt, hot by now, is offered.)
  const TargetId untrusted[] = {w1_};
  RoutingInput rendered_apart = Input();
  rendered_apart.overlap_untrusted = untrusted;
  EXPECT_EQ(s.AdviseHold(rendered_apart, cands, 100, 8, false), Hold::kOffer);
  // ...but not past the first threshold (every request waits there).
  EXPECT_EQ(s.AdviseHold(Input(), cands, 9, 8, false), Hold::kWait);
  // Under the join threshold with others waiting: the cold prompt is offered (it
  // queues behind them); the cached one still passes.
  EXPECT_EQ(s.AdviseHold(cold, cands, 100, 20, true), Hold::kOffer);
  EXPECT_EQ(s.AdviseHold(Input(), cands, 100, 20, true), Hold::kBypass);
  // Held requests are released under the lower of the two thresholds.
  EXPECT_DOUBLE_EQ(Selector::ReleaseBelow(1024, 300), 300.0);
  EXPECT_DOUBLE_EQ(Selector::ReleaseBelow(1024, 0), 1024.0);
  EXPECT_DOUBLE_EQ(Selector::ReleaseBelow(100, 300), 100.0);
}

// The share gate (--kv-inflight-share-window, 4 here, 2 candidates): the credit holds
// while the prompt's first block is at most 4 / 2 = 2 of the last 4 picks. The setting
// of the test above (W0 computing the prompt, 10 blocks; W1 a 4-block prefill of its
// own): the first two duplicates are credited and follow W0 (10 < 12); the third is the
// prompt's third of three picks and computes it on W1 (15 > 12), like the fourth; after
// two picks of another prompt it is 2 of the last 4 again and is credited. Decode picks
// are never credited.
TEST_F(SelectorTest, InflightCreditStopsForAPromptThatIsMostOfTheTraffic) {
  PolicyConfig c;
  c.inflight_share_window = 4;
  Selector& s = Make(c);
  std::vector<LoadState::ActiveGuard> held;
  held.push_back(s.load().AddActive(w0_, chain_, 0, {.blocks = 10, .last_block = chain_.back()}));
  Prefilling(s, w1_, 4);
  const TargetId cands[] = {w0_, w1_};
  auto pick = [&](bool credited) {
    auto p = s.Pick(Input(), cands);
    ASSERT_TRUE(p.ok());
    EXPECT_DOUBLE_EQ(p->costs[0], credited ? 10.0 : 15.0);
    EXPECT_EQ(p->picked, credited ? w0_ : w1_);
    EXPECT_EQ(p->inflight_hits, credited ? 10u : 0u);
    p->guard.Release();
  };
  pick(true);
  pick(true);
  pick(false);
  pick(false);
  const std::vector<TokenId> other = OtherTokens(20, 7000);
  RoutingInput in = Input();
  in.tokens = std::span<const TokenId>(other);
  for (int i = 0; i < 2; ++i) {
    auto p = s.Pick(in, cands);
    ASSERT_TRUE(p.ok());
    p->guard.Release();
  }
  pick(true);
  RoutingInput decode = Input();
  decode.role = Role::kDecode;
  auto d = s.Pick(decode, cands);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->inflight_hits, 0u);
}

// --kv-seq-wait-load (default 256; 0 and 15 here): W0 holds the prompt but runs its
// max_num_seqs (2), so a new request would wait for a slot: 15 blocks, not divided by the
// queue scaling (1 + 1 / 2 here, from W1's 4-block prefill): 15 against cold W1's
// 10 + 4 / 1.5. Off, W0's full hit wins (0).
TEST_F(SelectorTest, SeqWaitSendsTheRequestAwayFromAnEngineAtMaxNumSeqs) {
  for (double seq_wait : {0.0, 15.0}) {
    PolicyConfig c;
    c.seq_wait_blocks = seq_wait;
    Selector& s = Make(c);
    index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);
    s.load().SetMaxSeqs(w0_, 2);
    s.load().SetMaxSeqs(w1_, 2);
    Busy(s, w0_, 3);
    Busy(s, w0_, 3);
    Prefilling(s, w1_, 4);
    const TargetId cands[] = {w0_, w1_};
    auto p = s.Pick(Input(), cands);
    ASSERT_TRUE(p.ok());
    EXPECT_DOUBLE_EQ(p->costs[0], seq_wait);
    EXPECT_DOUBLE_EQ(p->costs[1], 10 + 4 / 1.5);
    EXPECT_EQ(p->picked, seq_wait > 0 ? w1_ : w0_);
    p->guard.Release();
    index_.RemoveRouterHashes(w0_, chain_, Tier::kDevice);
  }
}

// --kv-timed-prefill (off by default): W0 and W1 each compute a 20-block prefill, W0's
// dispatched 10 ms earlier. Untimed they tie (20 each) and the rotation decides; timed
// (1000 blocks/s: 1 block per ms) W0's is 10 blocks further on, so a cold request goes
// to W0, the one round-robin would pick (its prefill is the most advanced).
TEST_F(SelectorTest, TimedPrefillPrefersTheMostAdvancedPrefill) {
  constexpr int64_t kMs = 1'000'000;
  for (bool timed : {false, true}) {
    PolicyConfig c;
    c.timed_prefill = timed;
    c.prefill_rate = 1000;
    ManualClock clock(0);
    busy_.clear();
    selector_ = std::make_unique<Selector>(c, index_, &clock);
    Selector& s = *selector_;
    const std::vector<TokenId> a = OtherTokens(20, 5000), b = OtherTokens(20, 9000);
    RoutingInput in = Input();
    const TargetId only_w0[] = {w0_}, only_w1[] = {w1_};
    in.tokens = std::span<const TokenId>(a);
    auto p0 = s.Pick(in, only_w0);
    clock.Set(10 * kMs);
    in.tokens = std::span<const TokenId>(b);
    auto p1 = s.Pick(in, only_w1);
    ASSERT_TRUE(p0.ok() && p1.ok());
    clock.Set(15 * kMs);
    const TargetId cands[] = {w1_, w0_};
    for (int k = 0; k < 2; ++k) {  // both rotation starts
      auto p = s.Pick(Input(), cands);
      ASSERT_TRUE(p.ok());
      if (timed) {
        EXPECT_EQ(p->picked, w0_);
        // 20 − 15 = 5 blocks left, but never below the default floor 0.3 × 20 = 6 until
        // confirmed; scaled by 1 + 2 / 2.
        EXPECT_DOUBLE_EQ(p->load, 6.0 / 2);
      } else {
        EXPECT_DOUBLE_EQ(p->costs[0], p->costs[1]);
      }
      p->guard.Release();
    }
  }
}

// Hot-prefix replication (Preble's idea, issue 25) falls out of the cost: W0 holds the
// hot prompt but has 3 of them prefilling (30 blocks); scaled by 1 + 1.5 that is 12,
// more than cold W1's 10 misses, so W1 computes it and becomes its second home; once
// W1's view holds it too, the prompt goes to whichever home is less loaded.
TEST_F(SelectorTest, AHotPrefixGetsASecondHomeWhenItsHolderQueues) {
  Selector& s = Make(PolicyConfig{});
  index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);
  const TargetId w0_only[] = {w0_};
  std::vector<PickResult> running;
  for (int i = 0; i < 3; ++i) {
    auto hot = s.Pick(Input(), w0_only);
    ASSERT_TRUE(hot.ok());
    running.push_back(std::move(*hot));
  }
  // The view holds the whole chain, so those picks charged no pending prefill; the
  // queued work of the hot prompt's requests is added explicitly (3 × 10 blocks).
  PendingPrefill ten;
  ten.blocks = 10;
  std::vector<LoadState::ActiveGuard> queued;
  for (int i = 0; i < 3; ++i) queued.push_back(s.load().AddActive(w0_, {}, 1, ten));
  const TargetId cands[] = {w0_, w1_};
  auto second = s.Pick(Input(), cands);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->picked, w1_);  // the second home
  EXPECT_EQ(second->cache_hits, 0u);
  // W1's events store the prompt: both are homes; W0 is still busier.
  index_.InsertRouterHashes(w1_, chain_, Tier::kDevice);
  second->guard.PrefillDone();
  auto third = s.Pick(Input(), cands);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->picked, w1_);
  EXPECT_EQ(third->cache_hits, 10u);
  // W0 drains: it takes the prompt back (a hit on either; the lower load wins).
  queued.clear();
  third->guard.Release();
  auto fourth = s.Pick(Input(), cands);
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ(fourth->cache_hits, 10u);
}

TEST_F(SelectorTest, CapacityIsLearnedOnceTheViewHasEvicted) {
  Selector& s = Make(PolicyConfig{});
  index_.InsertRouterHashes(w0_, chain_, Tier::kDevice);  // 10 blocks, never evicted
  const TargetId only[] = {w0_};
  ASSERT_TRUE(s.Pick(Input(), only).ok());
  EXPECT_EQ(s.load().CapacityBlocks(w0_), 0u);  // a growing view says nothing yet
  index_.RemoveRouterHashes(w0_, std::span(chain_).last(2), Tier::kDevice);
  ASSERT_TRUE(s.Pick(Input(), only).ok());
  EXPECT_EQ(s.load().CapacityBlocks(w0_), 10u);  // evicting at 10: full at 10
  s.load().SetCapacityBlocks(w0_, 64);           // the worker record's num_gpu_blocks
  EXPECT_EQ(s.load().CapacityBlocks(w0_), 64u);
}

TEST_F(SelectorTest, ADriftingTargetsOverlapIsTrustedLess) {
  Selector& s = Make(PolicyConfig{});
  index_.InsertRouterHashes(w0_, std::span(chain_).first(8), Tier::kDevice);
  index_.InsertRouterHashes(w1_, std::span(chain_).first(5), Tier::kDevice);
  const TargetId cands[] = {w0_, w1_};
  auto trusted = s.Pick(Input(), cands);
  ASSERT_TRUE(trusted.ok());
  EXPECT_EQ(trusted->picked, w0_);  // 2 misses vs 5
  trusted->guard.Release();
  // W0's engine keeps reporting none of the hits its view promised.
  for (int i = 0; i < 8; ++i) s.predictions().Record(w0_, 8 * kBlock, 0);
  ASSERT_TRUE(s.predictions().Get(w0_).drifting);
  auto distrusted = s.Pick(Input(), cands);
  ASSERT_TRUE(distrusted.ok());
  EXPECT_DOUBLE_EQ(distrusted->costs[0], 10 - 0.25 * 8);
  EXPECT_DOUBLE_EQ(distrusted->costs[1], 10 - 5);
  EXPECT_EQ(distrusted->picked, w1_);
  s.RemoveTarget(w0_);
  EXPECT_FALSE(s.predictions().Get(w0_).drifting);
}

TEST_F(SelectorTest, OverlapUntrustedTargetIsNotCredited) {
  // Render parity (doc/render-parity.md): W0 renders differently. Its view holds the
  // whole prompt, W1's half of it; W0's hits are not credited, so the repeat goes to
  // W1, and W0 costs exactly what a cold target would (w x request_blocks + load).
  Selector& s = Make(Config(1.0));
  index_.InsertRouterHashes(w0_, std::span(chain_), Tier::kDevice);
  index_.InsertRouterHashes(w1_, std::span(chain_).first(5), Tier::kDevice);
  const TargetId cands[] = {w0_, w1_};
  auto trusted = s.Pick(Input(), cands);
  ASSERT_TRUE(trusted.ok());
  EXPECT_EQ(trusted->picked, w0_);  // control: trusted, the full holder wins
  EXPECT_DOUBLE_EQ(trusted->costs[0], 0);
  trusted->guard.Release();

  const TargetId untrusted[] = {w0_};
  RoutingInput in = Input();
  in.overlap_untrusted = untrusted;
  auto pick = s.Pick(in, cands);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(pick->picked, w1_);
  EXPECT_DOUBLE_EQ(pick->costs[0], 1.0 * 10);  // idle: load 0
  EXPECT_DOUBLE_EQ(pick->costs[1], 1.0 * (10 - 5));
  pick->guard.Release();

  // Not a free pass either: with nothing cached anywhere else, W0 is a cold target
  // like W1 (equal cost at equal load), not cheaper for lacking an overlap term.
  index_.RemoveTarget(w1_);
  s.RemoveTarget(w1_);
  const TargetId w2 = index_.AddTarget({"w2:8000", 0}, kBlock);
  const TargetId cold[] = {w0_, w2};
  auto tie = s.Pick(in, cold);
  ASSERT_TRUE(tie.ok());
  EXPECT_DOUBLE_EQ(tie->costs[0], tie->costs[1]);
  EXPECT_DOUBLE_EQ(tie->costs[0], 10.0);
  // The pick log still reports what the view holds, with the request's weight.
  EXPECT_EQ(tie->w_overlap, 1.0);
}

TEST_F(SelectorTest, DefaultImageAffinityHoldsForLongPrompts) {
  // A 100-block prompt with an image: the repeat goes back to the target holding the
  // image although the first request missed 100 blocks there.
  Selector& s = Make(PolicyConfig{});
  const std::vector<TokenId> long_prompt = OtherTokens(100, 9000);
  const std::vector<uint64_t> cat = {ImageKey("https://x/cat.png")};
  RoutingInput in = Input(Role::kMixed);
  in.tokens = std::span<const TokenId>(long_prompt);
  in.image_keys = cat;
  const TargetId cands[] = {w0_, w1_};
  auto first = s.Pick(in, cands);
  ASSERT_TRUE(first.ok());
  const TargetId warm = first->picked;
  first->guard.Release();
  for (int i = 0; i < 3; ++i) {
    auto again = s.Pick(in, cands);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->picked, warm);
    EXPECT_EQ(again->mm_affinity_hits, 1u);
  }
}

TEST_F(SelectorTest, BadCandidatesAreErrors) {
  Selector& s = Make(Config());
  EXPECT_EQ(s.Pick(Input(), {}).status().code(), absl::StatusCode::kInvalidArgument);
  const TargetId dead[] = {w0_, 999};
  EXPECT_EQ(s.Pick(Input(), dead).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.load().PendingGuards(), 0u);
}

TEST(PolicyConfigTest, ParseAndValidate) {
  EXPECT_EQ(*ParsePolicy("kv-aware"), Policy::kKvAware);
  EXPECT_EQ(*ParsePolicy("round-robin"), Policy::kRoundRobin);
  EXPECT_EQ(*ParsePolicy("random"), Policy::kRandom);
  EXPECT_EQ(*ParsePolicy("least-load"), Policy::kLeastLoad);
  EXPECT_FALSE(ParsePolicy("kv_aware").ok());
  PolicyConfig c;
  EXPECT_TRUE(c.Validate().ok());
  // The measured defaults of issue 25 (doc/results-sim.md): the slot wait on, the
  // in-flight credit on behind its share gate, the timed prefill with its floor.
  EXPECT_EQ(c.seq_wait_blocks, 256);
  EXPECT_EQ(c.inflight_credit, 0.5);
  EXPECT_EQ(c.inflight_credit_holders, 8u);
  EXPECT_EQ(c.inflight_share_window, 32u);
  EXPECT_TRUE(c.timed_prefill);
  EXPECT_EQ(c.timed_prefill_floor, 0.3);
  EXPECT_EQ(c.Load().seq_wait_blocks, 256);
  c.overlap_weight = -1;
  EXPECT_FALSE(c.Validate().ok());
  c = PolicyConfig{};
  c.recent_decay = 1.5;
  EXPECT_FALSE(c.Validate().ok());
  c = PolicyConfig{};
  c.prefill_overlap_weight = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(c.Validate().ok());
  c = PolicyConfig{};
  c.decode_load_blocks = -1;
  EXPECT_FALSE(c.Validate().ok());
  c = PolicyConfig{};
  c.seq_wait_blocks = -1;
  EXPECT_FALSE(c.Validate().ok());
  c = PolicyConfig{};
  c.inflight_credit = -0.5;
  EXPECT_FALSE(c.Validate().ok());
}

TEST(FormatPickLogTest, WeightsPrintLikePython) {
  PickResult r;
  r.request_id = "x";
  r.picked_name = "h:1#2";
  for (auto [w, text] :
       {std::pair{1.0, "1.0"}, {0.5, "0.5"}, {20.0, "20.0"}, {0.0, "0.0"}, {1e-5, "1e-05"}}) {
    r.w_overlap = w;
    const std::string line = FormatPickLog(r);
    EXPECT_NE(line.find(std::string(" w_overlap=") + text + " "), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace infera::core
