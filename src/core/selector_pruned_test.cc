// The pruned kv-aware pick against the full scan, side by side (doc/selection.md
// "Pruned pick"): two selectors over one index, fed the same picks, releases, settles
// and load reports, on seeded random fleets built for ties (identical idle targets,
// equal hits); every pick must name the same winner with the same cost, load, credit
// and runner-up cost (the route receipt's).
#include <gtest/gtest.h>

#include <iostream>
#include <numeric>
#include <vector>

#include "core/clock.h"
#include "core/hashing.h"
#include "core/selector.h"

namespace infera::core {
namespace {

struct Totals {
  size_t picks = 0;
  size_t pruned = 0;    // picks where the pruned pick scored fewer than all candidates
  size_t full = 0;      // picks where it had to score every candidate (w > 0)
};

PolicyConfig RandomConfig(Random& rng) {
  PolicyConfig c;
  c.load_term = rng.Uniform(4) == 0 ? LoadTerm::kSpec : LoadTerm::kWork;
  c.load_queue_scaling = rng.Uniform(2) == 0;
  c.timed_prefill = rng.Uniform(3) == 0;
  c.decode_load_blocks = rng.Uniform(2) == 0 ? 0 : 64;
  c.seq_wait_blocks = rng.Uniform(2) == 0 ? 0 : 256;
  c.inflight_credit = rng.Uniform(3) == 0 ? 0.5 : 0;
  c.host_hit_weight = rng.Uniform(3) == 0 ? 1.5 : 0.75;  // > 1: hits can outweigh the prompt
  const double weights[] = {1.0, 0.5, 0.0, 3.0};
  c.overlap_weight = weights[rng.Uniform(4)];
  c.kv_pressure_slope = rng.Uniform(2) == 0 ? 1.0 : 0.25;
  if (rng.Uniform(3) == 0) c.decode_overlap_weight = 0.25;
  return c;
}

// One seed: a fleet of up to 40 targets, 400 picks.
void RunSeed(uint64_t seed, Totals& totals) {
  Random rng(seed);
  const PolicyConfig config = RandomConfig(rng);
  ASSERT_TRUE(config.Validate().ok());
  KvIndex index;
  ManualClock clock(1'000'000'000);
  Selector full(config, index, &clock);
  Selector pruned(config, index, &clock);
  const bool two_sizes = rng.Uniform(4) == 0;
  const size_t n = 1 + rng.Uniform(40);
  std::vector<TargetId> targets;
  for (size_t i = 0; i < n; ++i) {
    const size_t block = two_sizes && i % 3 == 2 ? 8 : 4;
    targets.push_back(index.AddTarget({"w" + std::to_string(i) + ":8000", 0}, block));
  }
  // Prompts: a shared 6-block system prefix then one of 5 conversations of 10 blocks.
  std::vector<std::vector<TokenId>> prompts(5);
  for (size_t c = 0; c < prompts.size(); ++c) {
    prompts[c].resize(16 * 4);
    std::iota(prompts[c].begin(), prompts[c].end(), 1);
    for (size_t j = 6 * 4; j < prompts[c].size(); ++j) {
      prompts[c][j] = static_cast<TokenId>(1000 * (c + 1) + j);
    }
  }
  const Tier tiers[] = {Tier::kDevice, Tier::kHost, Tier::kDisk};
  // Most targets hold the prefix only (ties); a few hold a conversation to some depth.
  for (TargetId t : targets) {
    const size_t block = index.BlockSize(t);
    const auto& p = prompts[rng.Uniform(prompts.size())];
    const std::vector<BlockHash> chain = HashChain(p, block);
    size_t depth = rng.Uniform(5) == 0 ? rng.Uniform(chain.size() + 1) : 6 * 4 / block;
    if (rng.Uniform(6) == 0) depth = 0;
    if (depth > 0) {
      index.InsertRouterChain(t, 0, std::span(chain).first(depth), tiers[rng.Uniform(3)]);
    }
    if (rng.Uniform(4) == 0) {
      full.load().SetCapacityBlocks(t, 8 + rng.Uniform(40));
      pruned.load().SetCapacityBlocks(t, full.load().CapacityBlocks(t));
    }
    if (rng.Uniform(4) == 0) {
      const size_t seqs = 1 + rng.Uniform(3);
      full.load().SetMaxSeqs(t, seqs);
      pruned.load().SetMaxSeqs(t, seqs);
    }
  }
  const uint64_t images[] = {11, 22, 33};
  std::vector<std::pair<LoadState::ActiveGuard, LoadState::ActiveGuard>> inflight;
  for (int pick = 0; pick < 400; ++pick) {
    clock.Advance(static_cast<int64_t>(rng.Uniform(5'000'000)));
    // Candidates: a random subset in random order.
    std::vector<TargetId> cands = targets;
    for (size_t i = cands.size(); i > 1; --i) std::swap(cands[i - 1], cands[rng.Uniform(i)]);
    cands.resize(1 + rng.Uniform(cands.size()));
    RoutingInput input;
    // The router's PD picks take the pruned path too (decode: its own weight, no images).
    const uint64_t role = rng.Uniform(6);
    input.role = role == 0 ? Role::kPrefill : role == 1 ? Role::kDecode : Role::kMixed;
    input.request_id = "r";
    const auto& p = prompts[rng.Uniform(prompts.size())];
    if (rng.Uniform(10) != 0) {
      input.tokens = std::span<const TokenId>(p);
    } else {
      input.estimated_tokens = p.size();
    }
    if (rng.Uniform(10) == 0) input.image_keys = std::span(images).first(1 + rng.Uniform(3));
    std::vector<TargetId> untrusted;
    if (rng.Uniform(5) == 0) untrusted.push_back(targets[rng.Uniform(n)]);
    input.overlap_untrusted = untrusted;
    if (rng.Uniform(8) == 0) input.overlap_weight_factor = 0.5;
    auto a = full.Pick(input, cands);
    RoutingInput pruned_input = input;
    pruned_input.exact_costs = false;
    auto b = pruned.Pick(pruned_input, cands);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->picked, b->picked) << "seed " << seed << " pick " << pick;
    ASSERT_EQ(a->cost, b->cost) << "seed " << seed << " pick " << pick;
    ASSERT_EQ(a->load, b->load);
    ASSERT_EQ(a->credited, b->credited);
    ASSERT_EQ(a->cache_hits, b->cache_hits);
    ASSERT_EQ(a->inflight_hits, b->inflight_hits);
    ASSERT_EQ(a->mm_affinity_hits, b->mm_affinity_hits);
    // The runner-up's cost (the best of the others, the receipt's runner_up_cost).
    ASSERT_EQ(a->runner_up_cost, RunnerUpCost(a->costs, a->cost));
    ASSERT_EQ(a->runner_up_cost, b->runner_up_cost) << "seed " << seed << " pick " << pick;
    ASSERT_EQ(b->runner_up_cost.has_value(), cands.size() > 1);
    ASSERT_EQ(a->scored, cands.size());
    ASSERT_LE(b->scored, cands.size());
    // A skipped candidate's entry is a lower bound of its cost.
    for (size_t i = 0; i < cands.size(); ++i) ASSERT_LE(b->costs[i], a->costs[i]);
    ++totals.picks;
    if (b->scored < cands.size()) ++totals.pruned;
    if (b->scored == cands.size() && cands.size() > 1 && a->w_overlap > 0) ++totals.full;
    inflight.emplace_back(std::move(a->guard), std::move(b->guard));
    // Prefills finish, requests complete, engines report their caches: to both alike.
    if (!inflight.empty() && rng.Uniform(3) == 0) {
      auto& g = inflight[rng.Uniform(inflight.size())];
      g.first.PrefillDone(clock.NowNs());
      g.second.PrefillDone(clock.NowNs());
    }
    while (inflight.size() > 12 || (!inflight.empty() && rng.Uniform(4) == 0)) {
      const size_t at = rng.Uniform(inflight.size());
      inflight[at].first.Release();
      inflight[at].second.Release();
      inflight.erase(inflight.begin() + static_cast<std::ptrdiff_t>(at));
    }
    if (rng.Uniform(10) == 0) {
      const TargetId t = targets[rng.Uniform(n)];
      const size_t active = rng.Uniform(20);
      const double prefill = static_cast<double>(rng.Uniform(30));
      full.load().SetRemote(t, active, prefill);
      pruned.load().SetRemote(t, active, prefill);
    }
    if (rng.Uniform(20) == 0) {
      const TargetId t = targets[rng.Uniform(n)];
      full.predictions().Record(t, 4000, 0);
      pruned.predictions().Record(t, 4000, 0);
    }
    if (rng.Uniform(15) == 0) {
      // A view grows: a pending prefill's last block may now be confirmed.
      const TargetId t = targets[rng.Uniform(n)];
      const auto& q = prompts[rng.Uniform(prompts.size())];
      const std::vector<BlockHash> chain = HashChain(q, index.BlockSize(t));
      index.InsertRouterChain(t, 0, chain, Tier::kDevice);
    }
  }
}

TEST(SelectorPrunedTest, SameWinnersAsTheFullScanOnRandomFleets) {
  Totals totals;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    RunSeed(seed, totals);
    if (HasFatalFailure()) return;
  }
  RecordProperty("pruned_picks", static_cast<int>(totals.pruned));
  RecordProperty("full_picks", static_cast<int>(totals.full));
  std::cout << "picks " << totals.picks << ", pruned " << totals.pruned << ", all scored "
            << totals.full << "\n";
  EXPECT_EQ(totals.picks, 60u * 400u);
  // Both paths were taken: picks that skipped candidates, and picks where the bounds
  // left every candidate to score (ties with the best, no tokens, images, w = 0 aside).
  EXPECT_GT(totals.pruned, totals.picks / 10);
  EXPECT_GT(totals.full, 0u);
}

}  // namespace
}  // namespace infera::core
