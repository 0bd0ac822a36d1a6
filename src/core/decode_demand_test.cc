#include "core/decode_demand.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infera::core {
namespace {

TEST(DecodeDemandTest, LowestProjectedDemandWinsAndReleasesOnce) {
  DecodeDemand d;
  std::vector<std::string> keys = {"a", "b"};
  std::vector<double> loads = {0, 0};
  EXPECT_EQ(d.Select(keys, loads, 100), 0u);  // tie: candidate order
  auto r1 = d.Reserve("a", DecodeDemand::Demand(100, 2));
  EXPECT_EQ(d.Tokens("a"), 200u);
  EXPECT_EQ(d.Select(keys, loads, 100), 1u);
  DecodeDemand::Reservation moved = std::move(r1);
  EXPECT_FALSE(r1.pending());
  moved.Release();
  moved.Release();
  EXPECT_EQ(d.Tokens("a"), 0u);
  EXPECT_EQ(d.EntryCount(), 0u);
}

TEST(DecodeDemandTest, InvalidNCountsAsOneAndTiesUseLoad) {
  EXPECT_EQ(DecodeDemand::Demand(10, 0), 10u);
  EXPECT_EQ(DecodeDemand::Demand(10, -3), 10u);
  DecodeDemand d;
  std::vector<std::string> keys = {"a", "b"};
  std::vector<double> loads = {5, 1};
  EXPECT_EQ(d.Select(keys, loads, 10), 1u);
}

TEST(DecodeDemandTest, RequestWeightCountsHeldRequests) {
  DecodeDemand d(/*request_weight=*/1000);
  auto small1 = d.Reserve("a", 10);
  auto small2 = d.Reserve("a", 10);
  auto big = d.Reserve("b", 1500);
  std::vector<std::string> keys = {"a", "b"};
  std::vector<double> loads = {0, 0};
  // a: 20 + 5 + 2000 = 2025; b: 1500 + 5 + 1000 = 2505 -> a.
  EXPECT_EQ(d.Select(keys, loads, 5), 0u);
  auto third = d.Reserve("a", 10);
  // a: 30 + 5 + 3000 = 3035 > b: 2505 -> b.
  EXPECT_EQ(d.Select(keys, loads, 5), 1u);
  EXPECT_EQ(d.Requests("a"), 3u);
}

// The spec's cost: in-flight input tokens + this request's tokens × n (+ W × held
// requests). Two decode targets, 1000 tokens in flight on "a": a 300-token request
// with n = 2 projects 1600 on "a" and 600 on "b".
TEST(DecodeDemandTest, ProjectedDemandIsInFlightPlusTokensTimesN) {
  DecodeDemand d;
  auto held = d.Reserve("a", 1000);
  const uint64_t demand = DecodeDemand::Demand(300, 2);
  EXPECT_EQ(demand, 600u);
  EXPECT_DOUBLE_EQ(d.Cost("a", demand), 1600);
  EXPECT_DOUBLE_EQ(d.Cost("b", demand), 600);
}

TEST(DecodeDemandTest, EqualCostsTieOnOriginalLoadThenCandidateOrder) {
  DecodeDemand d;
  std::vector<std::string> keys = {"a", "b", "c"};
  // All empty: equal costs. Lowest original load wins ...
  std::vector<double> loads = {3, 1, 2};
  EXPECT_EQ(d.Select(keys, loads, 10), 1u);
  // ... and equal loads go to candidate order.
  std::vector<double> same = {1, 1, 1};
  EXPECT_EQ(d.Select(keys, same, 10), 0u);
}

TEST(DecodeDemandTest, ShadowKeepsTheOriginalAndOnTakesTheSuggestion) {
  DecodeDemand d;
  auto held = d.Reserve("a", 500);
  std::vector<std::string> keys = {"a", "b"};
  std::vector<double> loads = {0, 0};
  DemandDecision shadow = d.Decide(DemandMode::kShadow, keys, loads, 100, /*original=*/0);
  EXPECT_EQ(shadow.suggestion, 1u);
  EXPECT_EQ(shadow.chosen, 0u);
  EXPECT_FALSE(shadow.agrees());
  ASSERT_EQ(shadow.costs.size(), 2u);
  EXPECT_DOUBLE_EQ(shadow.costs[0], 600);
  EXPECT_DOUBLE_EQ(shadow.costs[1], 100);
  DemandDecision on = d.Decide(DemandMode::kOn, keys, loads, 100, /*original=*/0);
  EXPECT_EQ(on.chosen, 1u);
  DemandDecision agree = d.Decide(DemandMode::kOn, keys, loads, 100, /*original=*/1);
  EXPECT_TRUE(agree.agrees());
  EXPECT_EQ(agree.chosen, 1u);
}

// Request-count weight (spec "Request-count weight"): one big request vs many short
// ones; W = 0 is token-only demand.
TEST(DecodeDemandTest, RequestWeightZeroIsTokenOnly) {
  DecodeDemand d(/*request_weight=*/0);
  std::vector<DecodeDemand::Reservation> held;
  for (int i = 0; i < 10; ++i) held.push_back(d.Reserve("a", 10));  // 100 tokens, 10 requests
  held.push_back(d.Reserve("b", 1000));                             // 1000 tokens, 1 request
  std::vector<std::string> keys = {"a", "b"};
  std::vector<double> loads = {0, 0};
  EXPECT_EQ(d.Select(keys, loads, 5), 0u);
  DecodeDemand w(/*request_weight=*/1000);
  std::vector<DecodeDemand::Reservation> held2;
  for (int i = 0; i < 10; ++i) held2.push_back(w.Reserve("a", 10));
  held2.push_back(w.Reserve("b", 1000));
  // a: 100 + 5 + 10 000 = 10 105; b: 1000 + 5 + 1000 = 2005 -> b.
  EXPECT_EQ(w.Select(keys, loads, 5), 1u);
}

// Live reservations survive the worker leaving discovery; a late completion never
// subtracts from the entry of a worker recreated under the same key.
TEST(DecodeDemandTest, LateReleaseAfterForgetLeavesTheRecreatedEntryAlone) {
  DecodeDemand d;
  auto old_booking = d.Reserve("w:1", 700);
  d.Forget("w:1");  // left discovery, mid-request
  EXPECT_EQ(d.Tokens("w:1"), 0u);
  EXPECT_EQ(d.LiveReservations(), 1u);
  auto fresh = d.Reserve("w:1", 50);  // recreated, a new request
  EXPECT_EQ(d.Tokens("w:1"), 50u);
  old_booking.Release();  // the late completion
  EXPECT_EQ(d.Tokens("w:1"), 50u);
  EXPECT_EQ(d.Requests("w:1"), 1u);
  EXPECT_EQ(d.LiveReservations(), 1u);
  fresh.Release();
  EXPECT_EQ(d.EntryCount(), 0u);
  EXPECT_EQ(d.LiveReservations(), 0u);
}

TEST(DecodeDemandTest, MoveAssignReleasesTheOverwrittenBooking) {
  DecodeDemand d;
  auto a = d.Reserve("a", 10);
  auto b = d.Reserve("b", 20);
  a = std::move(b);  // a's booking goes
  EXPECT_EQ(d.Tokens("a"), 0u);
  EXPECT_EQ(d.Tokens("b"), 20u);
  EXPECT_EQ(d.LiveReservations(), 1u);
  a.Release();
  b.Release();
  EXPECT_EQ(d.LiveReservations(), 0u);
}

TEST(DecodeDemandTest, RemoteDemandAddsToTheCostButNotToTheOwnCounts) {
  DecodeDemand d(/*request_weight=*/10);
  std::vector<std::string> keys = {"a", "b"};
  std::vector<double> loads = {0, 0};
  auto own = d.Reserve("b", 50);
  EXPECT_EQ(d.Select(keys, loads, 1), 0u);
  d.SetRemote("a", 100, 2);  // another replica holds 2 requests, 100 tokens on a
  EXPECT_DOUBLE_EQ(d.Cost("a", 1), 100 + 1 + 10 * 2);
  EXPECT_EQ(d.Select(keys, loads, 1), 1u);
  EXPECT_EQ(d.Tokens("a"), 0u);  // own counts are what this replica publishes
  EXPECT_EQ(d.RemoteTokens("a"), 100u);
  EXPECT_EQ(d.RemoteRequests("a"), 2u);
  d.SetRemote("a", 0, 0);
  EXPECT_EQ(d.RemoteTokens("a"), 0u);
  EXPECT_EQ(d.Select(keys, loads, 1), 0u);
}

TEST(DecodeDemandTest, ParseMode) {
  EXPECT_EQ(*ParseDemandMode("shadow"), DemandMode::kShadow);
  EXPECT_EQ(*ParseDemandMode("off"), DemandMode::kOff);
  EXPECT_EQ(*ParseDemandMode("on"), DemandMode::kOn);
  EXPECT_FALSE(ParseDemandMode("maybe").ok());
  EXPECT_FALSE(ParseDemandMode("").ok());
  EXPECT_STREQ(DemandModeName(DemandMode::kShadow), "shadow");
}

}  // namespace
}  // namespace infera::core
