// Statistical simulation of the selector over a seeded synthetic shared-prefix
// stream (the Envoy-style "many picks, check the spread" test).
//
// The engine side is modelled minimally: a picked target caches the request's
// blocks once the request completes (as an engine's KV events would report them), and
// each request stays in flight for a few picks.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <list>
#include <map>
#include <numeric>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/hashing.h"
#include "core/selector.h"

namespace infera::core {
namespace {

constexpr size_t kSimBlock = 16;

struct Outcome {
  std::map<int, std::map<TargetId, int>> picks_by_group;  // group -> target -> picks
  double hit_rate = 0;                                    // cached / prompt blocks
};

// `groups` conversation groups, each with its own kPrefixBlocks-block system prompt
// and a unique kQuestionBlocks-block question per request; requests stay in flight
// for `inflight` picks.
constexpr size_t kPrefixBlocks = 32;
constexpr size_t kQuestionBlocks = 1;

// Each simulated engine's cache holds this many blocks (LRU): room for three of the
// eight groups' prompts, so a policy that scatters groups thrashes.
constexpr size_t kCacheBlocks = 3 * (kPrefixBlocks + kQuestionBlocks);

// A target's block cache with LRU eviction, reported to the index like KV events.
class EngineCache {
 public:
  void Store(KvIndex& index, TargetId target, std::span<const BlockHash> chain) {
    for (BlockHash h : chain) {
      auto it = where_.find(h);
      if (it != where_.end()) order_.erase(it->second);
      order_.push_front(h);
      where_[h] = order_.begin();
    }
    index.InsertRouterHashes(target, chain, Tier::kDevice);
    std::vector<BlockHash> evicted;
    while (order_.size() > kCacheBlocks) {
      evicted.push_back(order_.back());
      where_.erase(order_.back());
      order_.pop_back();
    }
    index.RemoveRouterHashes(target, evicted, Tier::kDevice);
  }

 private:
  std::list<BlockHash> order_;
  std::unordered_map<BlockHash, std::list<BlockHash>::iterator> where_;
};

Outcome Simulate(Policy policy, int targets, int groups, int requests, size_t inflight,
                 uint64_t seed, int hot_group = -1, double weight = 1.0) {
  KvIndex index;
  std::vector<TargetId> ids;
  for (int i = 0; i < targets; ++i) {
    ids.push_back(index.AddTarget({absl::StrCat("w", i, ":8000"), 0}, kSimBlock));
  }
  PolicyConfig config;
  config.policy = policy;
  config.random_seed = seed;
  config.overlap_weight = weight;
  Selector selector(config, index);
  Random rng(seed);
  std::vector<EngineCache> caches(targets);

  struct InFlight {
    TargetId target;
    std::vector<BlockHash> chain;
    LoadState::ActiveGuard guard;
  };
  std::deque<InFlight> running;
  Outcome out;
  size_t cached = 0, total = 0;
  TokenId next_unique = 1'000'000;
  for (int r = 0; r < requests; ++r) {
    const int g = hot_group >= 0 ? hot_group : static_cast<int>(rng.Uniform(groups));
    std::vector<TokenId> tokens((kPrefixBlocks + kQuestionBlocks) * kSimBlock);
    for (size_t i = 0; i < kPrefixBlocks * kSimBlock; ++i) {
      tokens[i] = static_cast<TokenId>(g * 100000 + i);
    }
    for (size_t i = kPrefixBlocks * kSimBlock; i < tokens.size(); ++i) tokens[i] = next_unique++;
    RoutingInput input;
    input.request_id = "r";
    input.tokens = std::span<const TokenId>(tokens);
    auto pick = selector.Pick(input, ids);
    EXPECT_TRUE(pick.ok());
    ++out.picks_by_group[g][pick->picked];
    cached += pick->cache_hits;
    total += pick->request_blocks;
    running.push_back({pick->picked, HashChain(tokens, kSimBlock), std::move(pick->guard)});
    while (running.size() > inflight || (inflight == 0 && !running.empty())) {
      // Completion: release the load, and the engine reports the blocks it cached.
      InFlight done = std::move(running.front());
      running.pop_front();
      done.guard.Release();
      caches[done.target].Store(index, done.target, done.chain);
    }
  }
  out.hit_rate = static_cast<double>(cached) / static_cast<double>(total);
  EXPECT_EQ(selector.load().PendingGuards(), running.size());
  return out;
}

// Share of a group's picks that went to its most-picked target.
[[maybe_unused]] void Print(const char* name, const Outcome& o) {
  printf("%s hit_rate=%.3f\n", name, o.hit_rate);
  for (const auto& [g, picks] : o.picks_by_group) {
    printf("  group %d:", g);
    for (auto [t, n] : picks) printf(" t%u=%d", t, n);
    printf("\n");
  }
}

double TopShare(const std::map<TargetId, int>& picks) {
  int sum = 0, top = 0;
  for (auto [t, n] : picks) {
    sum += n;
    top = std::max(top, n);
  }
  return sum ? static_cast<double>(top) / sum : 0;
}

TEST(SelectionSimulationTest, KvAwareKeepsGroupsOnTheirWarmTarget) {
  // 8 groups on 4 targets whose caches hold 3 groups' prompts each; two requests in
  // flight; a prefill-like overlap weight.
  const Outcome kv = Simulate(Policy::kKvAware, 4, 8, 1000, 2, 11, -1, /*weight=*/4.0);
  const Outcome rr = Simulate(Policy::kRoundRobin, 4, 8, 1000, 2, 11, -1, 4.0);
  Print("kv-aware", kv);
  Print("round-robin", rr);
  // Every group stays on one target under kv-aware ...
  for (const auto& [g, picks] : kv.picks_by_group) EXPECT_GT(TopShare(picks), 0.9) << g;
  // ... round-robin spreads each group over the fleet and thrashes the caches ...
  for (const auto& [g, picks] : rr.picks_by_group) EXPECT_LT(TopShare(picks), 0.4) << g;
  // ... so kv-aware serves nearly all of the shared prefix from cache (the maximum
  // is 32 of 33 blocks, 0.97) and round-robin almost none.
  EXPECT_GT(kv.hit_rate, 0.9);
  EXPECT_LT(rr.hit_rate, 0.2);
  // The groups are spread over the whole fleet, not piled on one target.
  std::map<TargetId, int> per_target;
  for (const auto& [g, picks] : kv.picks_by_group) {
    for (auto [t, n] : picks) per_target[t] += n;
  }
  EXPECT_EQ(per_target.size(), 4u);
  for (auto [t, n] : per_target) EXPECT_GT(n, 1000 / 8) << "target " << t;
}

TEST(SelectionSimulationTest, DefaultWeightStillBeatsRoundRobin) {
  // With --kv-overlap-weight 1.0 one in-flight request's blocks weigh as much as a
  // full miss, so groups move more; the cache term still wins often.
  const Outcome kv = Simulate(Policy::kKvAware, 4, 8, 1000, 2, 12);
  const Outcome rr = Simulate(Policy::kRoundRobin, 4, 8, 1000, 2, 12);
  printf("kv-aware hit_rate=%.3f round-robin hit_rate=%.3f\n", kv.hit_rate, rr.hit_rate);
  EXPECT_GT(kv.hit_rate, rr.hit_rate + 0.3);
}

TEST(SelectionSimulationTest, HotGroupStaysWarmSeriallyAndSpreadsUnderLoad) {
  // One hot group. Serial traffic (nothing in flight at a pick) has no load to
  // balance: every repeat goes back to the warm target and hits (the default load
  // term counts pending prefill work, and a confirmed prefix is not charged twice).
  const Outcome serial = Simulate(Policy::kKvAware, 4, 1, 1000, 0, 5, /*hot_group=*/0);
  Print("serial", serial);
  EXPECT_GT(TopShare(serial.picks_by_group.at(0)), 0.99);
  EXPECT_GT(serial.hit_rate, 0.96);
  // With requests in flight, their pending prefill spreads the group while every
  // target it uses is warm.
  const Outcome busy = Simulate(Policy::kKvAware, 4, 1, 1000, 8, 6, /*hot_group=*/0, 4.0);
  Print("busy", busy);
  EXPECT_GE(busy.picks_by_group.at(0).size(), 2u);
  EXPECT_LT(TopShare(busy.picks_by_group.at(0)), 0.95);
  EXPECT_GT(busy.hit_rate, 0.9);
}

}  // namespace
}  // namespace infera::core
