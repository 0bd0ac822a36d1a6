#include "core/pd_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "core/hashing.h"

namespace infera::core {
namespace {

using ::testing::HasSubstr;

constexpr size_t kPlanBlock = 4;

// Two prefill, two decode and one mixed target over one index; a 10-block prompt.
class PdPlannerTest : public ::testing::Test {
 protected:
  PdPlannerTest() : tokens_(10 * kPlanBlock) {
    std::iota(tokens_.begin(), tokens_.end(), 100);
    chain_ = HashChain(tokens_, kPlanBlock);
    p0_ = index_.AddTarget({"p0:1", 0}, kPlanBlock);
    p1_ = index_.AddTarget({"p1:1", 0}, kPlanBlock);
    d0_ = index_.AddTarget({"d0:1", 0}, kPlanBlock);
    d1_ = index_.AddTarget({"d1:1", 0}, kPlanBlock);
    m0_ = index_.AddTarget({"m0:1", 0}, kPlanBlock);
  }

  PolicyConfig Weights(double prefill, double decode) {
    PolicyConfig c;
    c.prefill_overlap_weight = prefill;
    c.decode_overlap_weight = decode;
    // The arithmetic below is the spec's formula (load = active blocks).
    c.load_term = LoadTerm::kSpec;
    c.recent_decay = 0;
    return c;
  }

  RoutingInput Input() {
    RoutingInput in;
    in.request_id = "r1";
    in.tokens = std::span<const TokenId>(tokens_);
    return in;
  }

  std::vector<PdCandidate> Fleet(std::string_view protocol = "sglang-bootstrap") {
    return {{p0_, Role::kPrefill, protocol},
            {p1_, Role::kPrefill, protocol},
            {d0_, Role::kDecode, protocol},
            {d1_, Role::kDecode, protocol}};
  }

  void Busy(Selector& s, TargetId t, size_t n) {
    std::vector<BlockHash> blocks;
    for (size_t i = 0; i < n; ++i) blocks.push_back(0xB000 + t * 1000 + i);
    busy_.push_back(s.load().AddActive(t, blocks));
  }

  // The selector outlives the fixture's guards (members die in reverse order).
  Selector& Make(const PolicyConfig& config) {
    busy_.clear();
    selector_ = std::make_unique<Selector>(config, index_);
    return *selector_;
  }

  KvIndex index_;
  std::vector<TokenId> tokens_;
  std::vector<BlockHash> chain_;
  TargetId p0_, p1_, d0_, d1_, m0_;
  std::unique_ptr<Selector> selector_;
  std::vector<LoadState::ActiveGuard> busy_;
};

TEST_F(PdPlannerTest, PrefillFollowsCacheDecodeFollowsLoad) {
  Selector& selector = Make(Weights(20, 2));
  PdPlanner planner(selector, index_);
  // p1 and d0 cache 8 of the 10 blocks; d0 is much busier than d1, p1 a little busier.
  index_.InsertRouterHashes(p1_, std::span(chain_).first(8), Tier::kDevice);
  index_.InsertRouterHashes(d0_, std::span(chain_).first(8), Tier::kDevice);
  Busy(selector, p1_, 30);
  Busy(selector, d0_, 30);
  auto plan = planner.Plan(Input(), Fleet());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kind, PdPlanKind::kDisaggregated);
  ASSERT_TRUE(plan->prefill.has_value());
  // prefill: 20 × 2 + 30 = 70 < 20 × 10 = 200; decode: 2 × 2 + 30 = 34 > 2 × 10 = 20.
  EXPECT_EQ(plan->prefill->picked, p1_);
  EXPECT_EQ(plan->prefill->role, Role::kPrefill);
  EXPECT_DOUBLE_EQ(plan->prefill->w_overlap, 20.0);
  EXPECT_EQ(plan->main.picked, d1_);
  EXPECT_EQ(plan->main.role, Role::kDecode);
  EXPECT_DOUBLE_EQ(plan->main.w_overlap, 2.0);
  EXPECT_EQ(plan->protocol, "sglang-bootstrap");
  EXPECT_THAT(FormatPickLog(*plan->prefill), HasSubstr("role=prefill"));
  EXPECT_THAT(FormatPickLog(plan->main), HasSubstr("role=decode"));
  // Both legs hold their own active blocks until their guards go.
  EXPECT_EQ(selector.load().ActiveBlocks(p1_), 30u + 10u);
  EXPECT_EQ(selector.load().ActiveBlocks(d1_), 10u);
  plan->prefill->guard.Release();
  plan->main.guard.Release();
  EXPECT_EQ(selector.load().ActiveBlocks(p1_), 30u);
  EXPECT_EQ(selector.load().ActiveBlocks(d1_), 0u);
}

TEST_F(PdPlannerTest, ImageAffinityActsOnPrefillOnly) {
  Selector& selector = Make(Weights(20, 2));
  PdPlanner planner(selector, index_);
  const uint64_t images[] = {0x1234};
  RoutingInput in = Input();
  in.image_keys = images;
  selector.images().Record(p1_, images);
  selector.images().Record(d0_, images);
  Busy(selector, p0_, 1);  // without the affinity term p0, the least busy, would win
  Busy(selector, p1_, 5);
  Busy(selector, d0_, 5);
  auto plan = planner.Plan(in, Fleet());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->prefill->picked, p1_);  // held image beats 4 blocks of load
  EXPECT_EQ(plan->prefill->mm_affinity_hits, 1u);
  EXPECT_EQ(plan->main.picked, d1_);  // decode routes by load alone
}

TEST_F(PdPlannerTest, MixedWorkersServeAloneWithoutACompletePair) {
  Selector& selector = Make(Weights(20, 2));
  PdPlanner planner(selector, index_);
  std::vector<PdCandidate> only_prefill = {{p0_, Role::kPrefill, "vllm-nixl"},
                                           {m0_, Role::kMixed, ""}};
  auto plan = planner.Plan(Input(), only_prefill);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kind, PdPlanKind::kMixed);
  EXPECT_EQ(plan->main.picked, m0_);
  EXPECT_EQ(plan->main.role, Role::kMixed);
  EXPECT_FALSE(plan->prefill.has_value());
  // With a complete pair the mixed worker is not used.
  std::vector<PdCandidate> all = Fleet("vllm-nixl");
  all.push_back({m0_, Role::kMixed, ""});
  for (int i = 0; i < 4; ++i) {
    auto p = planner.Plan(Input(), all);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->kind, PdPlanKind::kDisaggregated);
    EXPECT_NE(p->main.picked, m0_);
    EXPECT_NE(p->prefill->picked, m0_);
  }
}

TEST_F(PdPlannerTest, MissingPoolAndProtocolMismatchAreNamed) {
  Selector& selector = Make(Weights(20, 2));
  PdPlanner planner(selector, index_);
  std::vector<PdCandidate> prefill_only = {{p0_, Role::kPrefill, "vllm-nixl"}};
  auto a = planner.Plan(Input(), prefill_only);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("no decode worker"));
  std::vector<PdCandidate> decode_only = {{d0_, Role::kDecode, "vllm-nixl"}};
  auto b = planner.Plan(Input(), decode_only);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("no prefill worker"));
  std::vector<PdCandidate> mismatch = {{p0_, Role::kPrefill, "vllm-nixl"},
                                       {d0_, Role::kDecode, "sglang-bootstrap"}};
  auto c = planner.Plan(Input(), mismatch);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("prefill: vllm-nixl; decode: sglang-bootstrap"));
  EXPECT_EQ(planner.Plan(Input(), {}).status().code(), absl::StatusCode::kInvalidArgument);
  // Nothing was left booked by the failed plans.
  for (TargetId t : {p0_, d0_}) EXPECT_EQ(selector.load().ActiveBlocks(t), 0u);
}

TEST_F(PdPlannerTest, DecodePoolFollowsThePrefillPicksProtocol) {
  Selector& selector = Make(Weights(20, 2));
  PdPlanner planner(selector, index_);
  // p0 speaks nixl (with d0), p1 mooncake (with d1); p1 caches the prompt.
  index_.InsertRouterHashes(p1_, chain_, Tier::kDevice);
  std::vector<PdCandidate> fleet = {{p0_, Role::kPrefill, "vllm-nixl"},
                                    {p1_, Role::kPrefill, "vllm-mooncake"},
                                    {d0_, Role::kDecode, "vllm-nixl"},
                                    {d1_, Role::kDecode, "vllm-mooncake"}};
  Busy(selector, d1_, 50);  // d1 is far busier, but it is the only mooncake decode worker
  auto plan = planner.Plan(Input(), fleet);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->prefill->picked, p1_);
  EXPECT_EQ(plan->main.picked, d1_);
  EXPECT_EQ(plan->protocol, "vllm-mooncake");
  // A prefill worker whose protocol has no decode counterpart is never picked.
  std::vector<PdCandidate> partial = {{p0_, Role::kPrefill, "vllm-nixl"},
                                      {p1_, Role::kPrefill, "vllm-mooncake"},
                                      {d0_, Role::kDecode, "vllm-nixl"}};
  auto p = planner.Plan(Input(), partial);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->prefill->picked, p0_);
  EXPECT_EQ(p->main.picked, d0_);
}

TEST_F(PdPlannerTest, ConditionalDisaggregation) {
  Selector& selector = Make(Weights(20, 2));
  // 40-token prompt; p0 caches 8 blocks = 32 tokens, so 8 tokens are left to compute.
  index_.InsertRouterHashes(p0_, std::span(chain_).first(8), Tier::kDevice);
  {
    PdPlanner planner(selector, index_, {.min_uncached_tokens = 9});
    auto plan = planner.Plan(Input(), Fleet());
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->kind, PdPlanKind::kDecodeOnly);
    EXPECT_FALSE(plan->prefill.has_value());
    EXPECT_EQ(plan->main.role, Role::kDecode);
    EXPECT_EQ(plan->best_uncached_tokens, 8u);
    EXPECT_EQ(plan->protocol, "sglang-bootstrap");
    EXPECT_EQ(selector.load().ActiveBlocks(p0_), 0u);  // no prefill leg was booked
  }
  {
    PdPlanner planner(selector, index_, {.min_uncached_tokens = 8});
    auto plan = planner.Plan(Input(), Fleet());
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->kind, PdPlanKind::kDisaggregated);
    EXPECT_EQ(plan->prefill->picked, p0_);
  }
  {
    // A full hit still computes one token (the engines' rule).
    index_.InsertRouterHashes(p1_, chain_, Tier::kDevice);
    PdPlanner planner(selector, index_, {.min_uncached_tokens = 5});
    auto plan = planner.Plan(Input(), Fleet());
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->best_uncached_tokens, 4u);  // capped at (40 - 1) / 4 = 9 blocks
    EXPECT_EQ(plan->kind, PdPlanKind::kDecodeOnly);
  }
  {
    // Default 0: always disaggregate, and no extra hashing.
    PdPlanner planner(selector, index_);
    auto plan = planner.Plan(Input(), Fleet());
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->kind, PdPlanKind::kDisaggregated);
    EXPECT_FALSE(plan->best_uncached_tokens.has_value());
  }
}

TEST_F(PdPlannerTest, NarrowDecodeSeam) {
  Selector& selector = Make(Weights(20, 2));
  PdPlanner planner(selector, index_);
  Busy(selector, d1_, 50);
  planner.set_narrow_decode([&](const RoutingInput& in, std::vector<TargetId>& decode) {
    EXPECT_EQ(in.request_id, "r1");
    decode = {d1_};  // e.g. session affinity pins the decode target
  });
  auto plan = planner.Plan(Input(), Fleet());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->main.picked, d1_);
  planner.set_narrow_decode([](const RoutingInput&, std::vector<TargetId>& d) { d.clear(); });
  auto unchanged = planner.Plan(Input(), Fleet());  // emptied: the full pool is kept
  ASSERT_TRUE(unchanged.ok());
  EXPECT_EQ(unchanged->main.picked, d0_);
}

TEST_F(PdPlannerTest, PinSeamShrinksEachPoolBeforeItsPick) {
  Selector& selector = Make(Weights(20, 2));
  PdPlanner planner(selector, index_);
  // Unpinned, p1 (warm) and d1 (idle) would win.
  index_.InsertRouterHashes(p1_, std::span(chain_).first(8), Tier::kDevice);
  Busy(selector, d0_, 50);
  std::vector<Role> pools;
  planner.set_pin([&](Role pool, std::vector<TargetId>& c) {
    pools.push_back(pool);
    if (pool == Role::kPrefill) c = {p0_};
    if (pool == Role::kDecode) c = {d0_};
  });
  std::vector<TargetId> narrowed_from;
  planner.set_narrow_decode([&](const RoutingInput&, std::vector<TargetId>& d) {
    narrowed_from = d;  // runs after the pin
  });
  auto plan = planner.Plan(Input(), Fleet());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->prefill->picked, p0_);
  EXPECT_EQ(plan->main.picked, d0_);
  EXPECT_EQ(narrowed_from, std::vector<TargetId>{d0_});
  EXPECT_EQ(pools, (std::vector<Role>{Role::kPrefill, Role::kDecode}));

  // A pin that empties a pool keeps it whole.
  planner.set_narrow_decode(nullptr);
  planner.set_pin([](Role, std::vector<TargetId>& c) { c.clear(); });
  auto whole = planner.Plan(Input(), Fleet());
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->prefill->picked, p1_);
  EXPECT_EQ(whole->main.picked, d1_);
}

TEST_F(PdPlannerTest, PinSeamAppliesToTheMixedPoolAndTheUncachedCheck) {
  Selector& selector = Make(Weights(20, 2));
  const TargetId m1 = index_.AddTarget({"m1:1", 0}, kPlanBlock);
  {
    PdPlanner planner(selector, index_);
    planner.set_pin([&](Role pool, std::vector<TargetId>& c) {
      EXPECT_EQ(pool, Role::kMixed);
      c = {m1};
    });
    Busy(selector, m1, 30);  // busier, yet pinned
    const std::vector<PdCandidate> mixed = {{m0_, Role::kMixed, ""}, {m1, Role::kMixed, ""}};
    auto plan = planner.Plan(Input(), mixed);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->kind, PdPlanKind::kMixed);
    EXPECT_EQ(plan->main.picked, m1);
  }
  // Conditional disaggregation judges the pinned prefill target: p1 caches 9 of 10
  // blocks (4 uncached tokens), p0 none; pinned to p0 the request is disaggregated.
  index_.InsertRouterHashes(p1_, std::span(chain_).first(9), Tier::kDevice);
  PdPlanner planner(selector, index_, {.min_uncached_tokens = 8});
  ASSERT_EQ(planner.Plan(Input(), Fleet())->kind, PdPlanKind::kDecodeOnly);
  planner.set_pin([&](Role pool, std::vector<TargetId>& c) {
    if (pool == Role::kPrefill) c = {p0_};
  });
  auto plan = planner.Plan(Input(), Fleet());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->kind, PdPlanKind::kDisaggregated);
  EXPECT_EQ(plan->prefill->picked, p0_);
}

// The decode-demand seam: the chooser sees the original decode pick and its costs; a
// different choice is re-picked over that one target (its blocks booked, the original's
// released); prefill and mixed picks never consult it.
TEST_F(PdPlannerTest, ChooseDecodeSeamRepicksTheChosenTarget) {
  Selector& selector = Make(Weights(20, 2));
  PdPlanner planner(selector, index_);
  Busy(selector, d1_, 50);  // the original policy picks d0
  int calls = 0;
  planner.set_choose_decode([&](const RoutingInput& in, std::span<const TargetId> decode,
                                const PickResult& original) -> std::optional<size_t> {
    ++calls;
    EXPECT_EQ(in.role, Role::kDecode);
    EXPECT_EQ(original.picked, d0_);
    EXPECT_EQ(original.costs.size(), decode.size());
    for (size_t i = 0; i < decode.size(); ++i) {
      if (decode[i] == d1_) return i;
    }
    return std::nullopt;
  });
  {
    auto plan = planner.Plan(Input(), Fleet());
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(plan->main.picked, d1_);
    EXPECT_EQ(plan->main.role, Role::kDecode);
    EXPECT_EQ(selector.load().ActiveBlocks(d0_), 0u);  // the original pick's guard went
    EXPECT_EQ(selector.load().ActiveBlocks(d1_), 60u);
  }
  EXPECT_EQ(selector.load().ActiveBlocks(d1_), 50u);
  // Mixed plans (no complete pair) are unchanged.
  std::vector<PdCandidate> mixed = {{m0_, Role::kMixed, ""}};
  auto plan = planner.Plan(Input(), mixed);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->main.picked, m0_);
  EXPECT_EQ(calls, 1);
}

TEST(AlignBootstrapRoomTest, BelowTwoToThe63AndOnTheRank) {
  for (uint64_t random : {uint64_t{0}, uint64_t{12345}, ~uint64_t{0}, (uint64_t{1} << 63) - 1,
                          (uint64_t{1} << 63) - 2, uint64_t{1} << 63}) {
    for (uint32_t dp : {1u, 2u, 3u, 8u}) {
      for (uint32_t rank = 0; rank < dp; ++rank) {
        const uint64_t room = AlignBootstrapRoom(random, rank, dp);
        EXPECT_LT(room, uint64_t{1} << 63) << random << " " << dp << " " << rank;
        EXPECT_EQ(room % dp, rank) << random << " " << dp << " " << rank;
      }
    }
  }
  EXPECT_EQ(AlignBootstrapRoom(12345, 0, 1), 12345u);
}

}  // namespace
}  // namespace infera::core
