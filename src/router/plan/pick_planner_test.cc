// PickPlanner's picks take the pruned kv-aware pick (doc/selection.md "Pruned pick"):
// its route receipts must be those of the full scan. A planner and a core::Selector
// asking for exact costs, over one index, are fed the same requests, releases and
// prefill completions; every plan's receipt (the fleet view's last pick, the
// X-Infera-Route text) must equal the one built from the exact pick.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/hashing.h"
#include "core/selector.h"
#include "events/shared_kv_index.h"
#include "router/admin/fleet_history.h"
#include "router/metrics/router_metrics.h"
#include "router/plan/pick_planner.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

using core::TargetId;
using core::TokenId;

constexpr size_t kBlock = 16;
constexpr size_t kPrefix = 1;  // blocks

std::vector<TokenId> Tokens(core::Random& rng, size_t n) {
  std::vector<TokenId> out(n);
  for (TokenId& t : out) t = static_cast<TokenId>(rng.Uniform(50000));
  return out;
}

struct Bed {
  events::SharedKvIndex index;
  Fleet fleet;
  std::vector<TargetId> targets;  // in fleet order: the planner's candidate order
  std::vector<std::vector<TokenId>> conversations;
};

// 12 workers of 2 DP ranks serving "m": a 1-block prefix on every other target, 8
// conversations of 12 more blocks held by one of those each (the runner-up of a
// conversation's request is among the targets holding the prefix alone, or, when they
// are all loaded, one without).
void Build(Bed& b, core::Random& rng) {
  static std::atomic<uint64_t> counter{0};
  for (size_t i = 0; i < 12; ++i) {
    discovery::WorkerRecord r;
    r.worker_id = absl::StrCat("10.0.0.", i, ":8000");
    r.url = "http://" + r.worker_id;
    r.model_name = "m";
    r.dp_size = 2;
    auto w = std::make_shared<FleetWorker>(r, *http::ParseHttpUrl(r.url));
    for (auto& role : w->picks) role.assign(2, &counter);
    for (uint32_t k = 0; k < 2; ++k) {
      const TargetId t = b.index.WithWrite(
          [&](core::KvIndex& index) { return index.AddTarget({r.worker_id, k}, kBlock); });
      w->targets.push_back(t);
      b.targets.push_back(t);
    }
    b.fleet.push_back(std::move(w));
  }
  const std::vector<TokenId> prefix = Tokens(rng, kPrefix * kBlock);
  b.index.WithWrite([&](core::KvIndex& index) {
    const auto chain = core::HashChain(prefix, kBlock);
    for (size_t i = 0; i < b.targets.size(); i += 2) {
      index.InsertRouterChain(b.targets[i], 0, chain, core::Tier::kDevice);
    }
    for (size_t c = 0; c < 8; ++c) {
      std::vector<TokenId> tokens = prefix;
      const std::vector<TokenId> more = Tokens(rng, 12 * kBlock);
      tokens.insert(tokens.end(), more.begin(), more.end());
      const auto full = core::HashChain(tokens, kBlock);
      const TargetId holder = b.targets[2 * rng.Uniform(b.targets.size() / 2)];
      index.InsertRouterChain(holder, chain.back(), std::span(full).subspan(kPrefix),
                              core::Tier::kDevice);
      b.conversations.push_back(std::move(tokens));
    }
  });
}

TEST(PickPlannerTest, ReceiptsOfThePrunedPickAreTheFullScans) {
  const spdlog::level::level_enum level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);  // no pick log lines
  core::Random rng(7);
  Bed b;
  Build(b, rng);
  core::ManualClock clock(1'000'000'000);
  RouterMetrics metrics(core::Policy::kKvAware);
  PickPlanner planner(core::PolicyConfig{}, b.index, clock, metrics);
  core::Selector exact(core::PolicyConfig{}, b.index.index(), &clock);
  std::deque<std::pair<PickPlan, core::LoadState::ActiveGuard>> inflight;
  size_t loaded_runner_up = 0;  // receipts whose runner-up costs more than its bound
  for (int q = 0; q < 400; ++q) {
    clock.Advance(static_cast<int64_t>(rng.Uniform(3'000'000)));
    RequestContext ctx;
    ctx.request_id = "r" + std::to_string(q);
    ctx.api.model = "m";
    // Half continue a conversation, half are new prompts (no hit anywhere: the load
    // alone tells the runner-up from the others).
    std::vector<TokenId> tokens;
    const bool conversation = rng.Uniform(2) == 0;
    if (conversation) tokens = b.conversations[rng.Uniform(b.conversations.size())];
    const std::vector<TokenId> more = Tokens(rng, (1 + rng.Uniform(8)) * kBlock);
    tokens.insert(tokens.end(), more.begin(), more.end());
    ctx.tokens = tokens;
    PlanHistory history;
    absl::StatusOr<PickPlan> plan = planner.PlanMixed(ctx, b.fleet, history);
    ASSERT_TRUE(plan.ok()) << plan.status();

    core::RoutingInput input;
    input.role = core::Role::kMixed;
    input.request_id = ctx.request_id;
    input.tokens = std::span<const TokenId>(tokens);
    absl::StatusOr<core::PickResult> pick = exact.Pick(input, b.targets);
    ASSERT_TRUE(pick.ok());
    ASSERT_EQ(plan->legs[0].target, pick->picked) << "plan " << q;

    const std::vector<RouteReceipt> last = metrics.history().LastPicks();
    ASSERT_FALSE(last.empty());
    const RouteReceipt& got = last.back();
    ASSERT_EQ(got.request_id, ctx.request_id);
    ASSERT_EQ(got.legs.size(), 1u);
    pick->picked_name = got.legs[0].target;
    RouteReceipt want = got;
    want.legs[0] = LegReceiptOf(*pick);
    ASSERT_EQ(got.legs[0].runner_up_cost, want.legs[0].runner_up_cost) << "plan " << q;
    ASSERT_EQ(got.legs[0].candidates, b.targets.size());
    ASSERT_EQ(FormatRouteReceipt(got), FormatRouteReceipt(want)) << "plan " << q;
    // An idle target costs its bound: request_blocks - 1 with the prefix, else all.
    const double idle = got.legs[0].request_blocks - (conversation ? 1.0 : 0.0);
    if (*got.legs[0].runner_up_cost > idle + 1e-9) ++loaded_runner_up;

    // Prefills finish and requests complete: to both alike.
    if (rng.Uniform(8) == 0) {
      plan->guards.PrefillDone();
      pick->guard.PrefillDone(clock.NowNs());
    }
    inflight.emplace_back(*std::move(plan), std::move(pick->guard));
    // Up to 96 in flight on 24 targets: the runner-up is often a loaded target.
    while (inflight.size() > 96 || (!inflight.empty() && rng.Uniform(16) == 0)) {
      inflight.pop_front();
    }
  }
  // The runner-up was sometimes a loaded target, not an idle one at its bound.
  EXPECT_GT(loaded_runner_up, 40u);
  spdlog::set_level(level);
}

}  // namespace
}  // namespace infera::router
