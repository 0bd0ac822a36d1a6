#include "core/peer_policies.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/kv_index.h"
#include "core/selector.h"

namespace infera::core {
namespace {

PeerSignals Signals(double blocks, uint32_t device, double pending, size_t active, size_t fresh) {
  PeerSignals s;
  s.request_blocks = blocks;
  s.hits.device_hits = device;
  s.pending_prefill_blocks = pending;
  s.active_blocks = active;
  s.new_active_blocks = fresh;
  return s;
}

// Dynamo's documented cost (routing-concepts.md): prefill_load_scale ×
// max(0, active prefill + incoming prompt − overlap credit) + active decode blocks +
// incoming active blocks. A 10-block prompt: W0 holds 8 of them and has 20 blocks of
// prefill queued and 30 active blocks, W1 is cold and idle.
TEST(PeerPoliciesTest, DynamoCostIsCreditedPrefillPlusDecodeBlocks) {
  const DynamoConfig c;
  const PeerSignals w0 = Signals(10, 8, 20, 30, 2);
  const PeerSignals w1 = Signals(10, 0, 0, 0, 10);
  EXPECT_DOUBLE_EQ(DynamoCost(w0, Role::kMixed, c), (20 + 10 - 8) + 30 + 2);  // 54
  EXPECT_DOUBLE_EQ(DynamoCost(w1, Role::kMixed, c), 10 + 0 + 10);             // 20: W1 wins
  // Host and disk hits are credited 0.75 and 0.25.
  PeerSignals tiers = Signals(10, 2, 0, 0, 0);
  tiers.hits.host_hits = 4;
  tiers.hits.disk_hits = 4;
  EXPECT_DOUBLE_EQ(DynamoCredit(tiers, c), 2 + 3 + 1);
  // Decode picks: load only.
  EXPECT_DOUBLE_EQ(DynamoCost(w0, Role::kDecode, c), 32);
  // The prefill term is clamped at 0.
  EXPECT_DOUBLE_EQ(DynamoCost(Signals(4, 8, 0, 0, 0), Role::kMixed, c), 0);
}

// LMetric: new prefill tokens if routed there × (batch + 1): a warm engine with 4
// requests running (2 uncached blocks × 5 = 10) beats a cold idle one (10 × 1).
TEST(PeerPoliciesTest, LmetricMultipliesNewPrefillByBatch) {
  const DynamoConfig credit;
  PeerSignals warm = Signals(10, 8, 0, 0, 0);
  warm.requests = 4;
  PeerSignals cold = Signals(10, 0, 0, 0, 0);
  EXPECT_DOUBLE_EQ(LmetricCost(warm, credit), 10);
  EXPECT_DOUBLE_EQ(LmetricCost(cold, credit), 10);
  warm.requests = 5;
  EXPECT_GT(LmetricCost(warm, credit), LmetricCost(cold, credit));
}

// llm-d: 3 × prefix + 2 × queue + 2 × kv, each scorer in [0, 1]; the prefix scorer is
// min-max normalised among the candidates with any hit (llm-d's
// indexedScoresToNormalizedScoredPods).
TEST(PeerPoliciesTest, LlmdWeightsNormalisedScorers) {
  std::vector<PeerSignals> s(3);
  s[0].hits.device_hits = 8;  // most hits, 3 waiting, half full
  s[0].prefilling = 3;
  s[0].active_blocks = 50;
  s[0].capacity_blocks = 100;
  s[1].hits.device_hits = 4;  // fewer hits, idle
  s[1].capacity_blocks = 100;
  s[2].prefilling = 1;  // no hit
  s[2].capacity_blocks = 100;
  std::vector<double> out(3);
  LlmdScores(s, LlmdConfig{}, out);
  EXPECT_DOUBLE_EQ(out[0], 3 * 1.0 + 2 * 0.0 + 2 * 0.5);
  EXPECT_DOUBLE_EQ(out[1], 3 * 0.0 + 2 * 1.0 + 2 * 1.0);  // min of the hit candidates: 0
  EXPECT_DOUBLE_EQ(out[2], 3 * 0.0 + 2 * (2.0 / 3.0) + 2 * 1.0);
  // One candidate with hits scores 1 on prefix.
  s[1].hits.device_hits = 0;
  LlmdScores(s, LlmdConfig{}, out);
  EXPECT_DOUBLE_EQ(out[0], 3 * 1.0 + 0 + 1.0);
}

// SGLang's documented rule: imbalanced iff (max − min) > 64 AND max > 1.5 × min; then
// the shortest queue, else the longest match when its rate > 0.3, else the smallest
// tree.
TEST(PeerPoliciesTest, SglangCacheAwareRule) {
  const SglangConfig c;
  std::vector<PeerSignals> s(3);
  for (PeerSignals& p : s) p.request_blocks = 10;
  s[0].approx_hits = 8;
  s[0].approx_blocks = 500;
  s[0].requests = 70;
  s[1].approx_blocks = 100;
  s[1].requests = 10;
  s[2].approx_blocks = 50;
  s[2].requests = 20;
  // 70 − 10 = 60 <= 64: balanced; 8/10 > 0.3: the longest match.
  EXPECT_EQ(SglangChoose(s, c, 0), 0u);
  // 75 − 10 = 65 > 64 and 75 > 15: imbalanced, the least loaded.
  s[0].requests = 75;
  EXPECT_EQ(SglangChoose(s, c, 0), 1u);
  // Balanced, match 3/10 <= 0.3: the smallest tree.
  s[0].requests = 70;
  s[0].approx_hits = 3;
  EXPECT_EQ(SglangChoose(s, c, 0), 2u);
  // 200 − 140 = 60 <= 64: balanced whatever the ratio; the longest match.
  s[0].requests = 200;
  s[1].requests = 140;
  s[2].requests = 150;
  s[0].approx_hits = 8;
  EXPECT_EQ(SglangChoose(s, c, 0), 0u);
}

TEST(PeerPoliciesTest, PolicyNamesParse) {
  for (const char* name : {"dynamo", "lmetric", "llm-d", "sglang"}) {
    absl::StatusOr<Policy> p = ParsePolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_STREQ(PolicyName(*p), name);
  }
  EXPECT_FALSE(ParsePolicy("vllm").ok());
}

RoutingInput Input(const char* id, const std::vector<TokenId>& tokens) {
  RoutingInput in;
  in.request_id = id;
  in.tokens = std::span<const TokenId>(tokens);
  return in;
}

std::vector<TokenId> Tokens(size_t n, TokenId base) {
  std::vector<TokenId> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = base + static_cast<TokenId>(i);
  return t;
}

// Through the selector: SGLang's tree sends a repeat of a routed prompt back where it
// went (it learns from its own routing, no events needed); a new prompt goes to the
// smallest tree.
TEST(PeerPoliciesTest, SglangSelectorLearnsFromItsOwnRouting) {
  KvIndex index;
  const TargetId a = index.AddTarget({"a", 0}, 16);
  const TargetId b = index.AddTarget({"b", 0}, 16);
  const std::vector<TargetId> both = {a, b};
  PolicyConfig config;
  config.policy = Policy::kSglang;
  Selector selector(config, index);
  const std::vector<TokenId> p1 = Tokens(160, 1), p2 = Tokens(320, 5000);
  RoutingInput in = Input("r1", p1);
  absl::StatusOr<PickResult> first = selector.Pick(in, both);
  ASSERT_TRUE(first.ok());
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<PickResult> again = selector.Pick(in, both);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->picked, first->picked);
    EXPECT_EQ(again->cache_hits, 10u);
  }
  RoutingInput other = Input("r2", p2);
  absl::StatusOr<PickResult> second = selector.Pick(other, both);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->picked, first->picked);
  EXPECT_EQ(FormatPickLog(*second).rfind("pick policy=sglang", 0), 0u);
}

// Through the selector: Dynamo's prefill load counts until the first token even when
// the events already show the blocks (no view settling), LMetric's batch counts the
// guards in flight.
TEST(PeerPoliciesTest, DynamoAndLmetricThroughTheSelector) {
  KvIndex index;
  const TargetId a = index.AddTarget({"a", 0}, 16);
  const TargetId b = index.AddTarget({"b", 0}, 16);
  const std::vector<TargetId> both = {a, b};
  for (Policy policy : {Policy::kDynamo, Policy::kLmetric}) {
    PolicyConfig config;
    config.policy = policy;
    Selector selector(config, index);
    const std::vector<TokenId> p1 = Tokens(160, 1), p2 = Tokens(160, 9000);
    RoutingInput r1 = Input("r1", p1);
    RoutingInput r2 = Input("r2", p2);
    absl::StatusOr<PickResult> x = selector.Pick(r1, both);
    ASSERT_TRUE(x.ok());
    // The second request avoids the loaded engine (dynamo: 10 pending + 10 active
    // blocks; lmetric: batch 1).
    absl::StatusOr<PickResult> y = selector.Pick(r2, both);
    ASSERT_TRUE(y.ok());
    EXPECT_NE(x->picked, y->picked) << PolicyName(policy);
    EXPECT_EQ(selector.load().Requests(x->picked), 1u);
    if (policy == Policy::kDynamo) {
      EXPECT_DOUBLE_EQ(selector.load().PendingPrefillBlocks(x->picked), 10);
      x->guard.PrefillDone();
      EXPECT_DOUBLE_EQ(selector.load().PendingPrefillBlocks(x->picked), 0);
    }
  }
}

}  // namespace
}  // namespace infera::core
