#include "router/admin/fleet_history.h"

#include <gtest/gtest.h>

namespace infera::router {
namespace {

constexpr int64_t kS = 1'000'000'000;

RouteReceipt Receipt(int64_t at_ns, const std::string& target, uint32_t hits, uint32_t blocks) {
  RouteReceipt r;
  r.at_ns = at_ns;
  r.request_id = "r" + std::to_string(at_ns);
  RouteLegReceipt leg;
  leg.target = target;
  leg.cache_hits = hits;
  leg.request_blocks = blocks;
  r.legs.push_back(leg);
  return r;
}

TEST(RouteReceipt, RunnerUpIsThePicksRunnerUp) {
  core::PickResult pick;
  pick.picked_name = "w1";
  pick.cost = 2.5;
  // The pruned pick: a skipped candidate's entry is a bound (1.0 here), not its cost;
  // the receipt reads the pick's exact runner-up.
  pick.costs = {7.0, 2.5, 1.0, 2.5};
  pick.runner_up_cost = 2.5;  // a tie: the runner-up costs the same
  const RouteLegReceipt leg = LegReceiptOf(pick);
  ASSERT_TRUE(leg.runner_up_cost.has_value());
  EXPECT_EQ(*leg.runner_up_cost, 2.5);
  EXPECT_EQ(leg.candidates, 4u);
  pick.costs = {2.5};
  pick.runner_up_cost.reset();
  EXPECT_FALSE(LegReceiptOf(pick).runner_up_cost.has_value());  // one candidate
  pick.costs.clear();
  EXPECT_FALSE(LegReceiptOf(pick).runner_up_cost.has_value());  // round-robin, random
}

TEST(RouteReceipt, HeaderFormat) {
  RouteReceipt r;
  r.policy = core::Policy::kKvAware;
  RouteLegReceipt prefill;
  prefill.role = core::Role::kPrefill;
  prefill.target = "p;0 x";  // separators in a name are percent-encoded
  prefill.cache_hits = 3;
  prefill.request_blocks = 8;
  prefill.w_overlap = 1;
  prefill.credited = 3;
  prefill.load = 0.25;
  prefill.cost = 5.25;
  prefill.candidates = 2;
  prefill.runner_up_cost = 8;
  RouteLegReceipt decode;
  decode.role = core::Role::kDecode;
  decode.target = "d0#dp1";
  decode.request_blocks = 8;
  decode.candidates = 1;
  r.legs = {prefill, decode};
  EXPECT_EQ(FormatRouteReceipt(r),
            "role=prefill;target=p%3B0%20x;policy=kv-aware;cache_hits=3;request_blocks=8;"
            "cost=5.25;w_overlap=1;credited=3;load=0.25;candidates=2;runner_up_cost=8, "
            "role=decode;target=d0#dp1;policy=kv-aware;cache_hits=0;request_blocks=8;cost=0;"
            "w_overlap=0;credited=0;load=0;candidates=1");
}

TEST(FleetHistory, LastPicksAreBounded) {
  FleetHistory h;
  for (int i = 0; i < 100; ++i) h.RecordPick(Receipt(i * 1000, "w0", 1, 2));
  const std::vector<RouteReceipt> last = h.LastPicks();
  ASSERT_EQ(last.size(), FleetHistory::kLastPicks);
  EXPECT_EQ(last.front().at_ns, (100 - 64) * 1000);  // oldest first
  EXPECT_EQ(last.back().at_ns, 99 * 1000);
}

TEST(FleetHistory, PerSecondSeriesAndWindows) {
  FleetHistory h;
  const int64_t t0 = 1000 * kS;
  h.RequestStarted(t0);
  h.RecordPick(Receipt(t0 + 1, "w0", 3, 4));
  h.RequestStarted(t0 + 2);
  h.RecordPick(Receipt(t0 + 3, "w1", 0, 4));
  h.RequestEnded(t0 + kS / 2, 0.010);
  h.RequestEnded(t0 + 2 * kS, std::nullopt);  // no first byte (an error)
  const std::vector<FleetHistory::Second> s = h.Seconds(t0 + 3 * kS);
  ASSERT_EQ(s.size(), FleetHistory::kSeconds);
  const FleetHistory::Second& first = s[s.size() - 4];
  EXPECT_EQ(first.second, 1000);
  EXPECT_EQ(first.picks, 2u);
  EXPECT_EQ(first.hit_blocks, 3u);
  EXPECT_EQ(first.request_blocks, 8u);
  EXPECT_EQ(first.max_inflight, 2);
  EXPECT_EQ(first.ttft_count, 1u);
  EXPECT_DOUBLE_EQ(first.ttft_max_s, 0.010);
  EXPECT_EQ(s[s.size() - 3].max_inflight, 1);  // quiet: carried from the second before
  EXPECT_EQ(s[s.size() - 2].ended, 1u);
  EXPECT_EQ(s.back().max_inflight, 0);

  FleetHistory::TargetWindow w0 = h.Target("w0", t0 + 5 * kS);
  EXPECT_EQ(w0.picks, 1u);
  EXPECT_EQ(w0.hit_blocks, 3u);
  EXPECT_EQ(w0.picks_10s, 1u);
  w0 = h.Target("w0", t0 + 30 * kS);
  EXPECT_EQ(w0.picks, 1u);
  EXPECT_EQ(w0.picks_10s, 0u);                        // out of the 10 s window
  EXPECT_EQ(h.Target("w0", t0 + 60 * kS).picks, 0u);  // out of the minute
  // A pick a minute later drops the targets nobody picked since.
  h.RecordPick(Receipt(t0 + 61 * kS, "w2", 1, 1));
  EXPECT_EQ(h.tracked_targets(), 1u);
  // The series forgets what is older than its window.
  EXPECT_EQ(h.Seconds(t0 + 400 * kS).front().picks, 0u);
}

}  // namespace
}  // namespace infera::router
