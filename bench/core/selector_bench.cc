// Per-pick cost of core::Selector (kv-aware, default PolicyConfig) over a large fleet
// (doc/perf-scale.md "Pick cost at 4,104 targets"): the selector's share of a router
// pick, without the planner's candidate gathering.
//
//  * BM_Pick/targets/blocks_per_target: p50/p99 thread CPU time of one Selector::Pick
//    with every target a candidate. Index: a 128-block system prefix on every target,
//    64 conversations continuing it by 384 blocks held by 1-3 targets each, and
//    unrelated 64-block runs up to `blocks_per_target` on every target. Requests: a
//    conversation continued by 4 new blocks (deep hits on its holders, the prefix on
//    every other target). 256 picks stay in flight (their guards are released oldest
//    first, half of them past their prefill), so the load state is not empty.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
#include <deque>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/hashing.h"
#include "core/kv_index.h"
#include "core/selector.h"

namespace infera::core {
namespace {

constexpr size_t kBlockSize = 16;
constexpr size_t kPrefixBlocks = 128;
constexpr size_t kConversationBlocks = 512;  // prefix included
constexpr size_t kConversations = 64;
constexpr size_t kInFlight = 256;

struct Fleet {
  size_t targets = 0, blocks = 0;
  KvIndex index;
  std::vector<TargetId> ids;
  std::vector<std::vector<TokenId>> conversations;  // token ids
};

std::vector<TokenId> RandomTokens(Random& rng, size_t n) {
  std::vector<TokenId> out(n);
  for (auto& t : out) t = static_cast<TokenId>(rng.Uniform(50000));
  return out;
}

std::unique_ptr<Fleet> BuildFleet(size_t targets, size_t blocks_per_target) {
  auto f = std::make_unique<Fleet>();
  f->targets = targets;
  f->blocks = blocks_per_target;
  Random rng(targets * 7919 + blocks_per_target);
  for (size_t i = 0; i < targets; ++i) {
    f->ids.push_back(f->index.AddTarget(
        {absl::StrCat("10.0.", i / 2048, ".", (i / 8) % 256, ":", 8000 + i % 8), 0}, kBlockSize));
  }
  const std::vector<TokenId> prefix = RandomTokens(rng, kPrefixBlocks * kBlockSize);
  const std::vector<BlockHash> prefix_chain = HashChain(prefix, kBlockSize);
  std::vector<size_t> held(targets, kPrefixBlocks);
  for (TargetId t : f->ids) f->index.InsertRouterChain(t, 0, prefix_chain, Tier::kDevice);
  for (size_t c = 0; c < kConversations; ++c) {
    std::vector<TokenId> tokens = prefix;
    const auto more = RandomTokens(rng, (kConversationBlocks - kPrefixBlocks) * kBlockSize);
    tokens.insert(tokens.end(), more.begin(), more.end());
    const std::vector<BlockHash> chain = HashChain(tokens, kBlockSize);
    const uint64_t r = rng.Uniform(10);
    const size_t holders = std::min<size_t>(targets, r < 7 ? 1 : r < 9 ? 2 : 3);
    for (size_t k = 0; k < holders; ++k) {
      const size_t i = rng.Uniform(targets);
      f->index.InsertRouterChain(f->ids[i], prefix_chain.back(),
                                 std::span(chain).subspan(kPrefixBlocks), Tier::kDevice);
      held[i] += kConversationBlocks - kPrefixBlocks;
    }
    f->conversations.push_back(std::move(tokens));
  }
  std::vector<BlockHash> run(64);
  for (size_t i = 0; i < targets; ++i) {
    while (held[i] < blocks_per_target) {
      const size_t n = std::min(run.size(), blocks_per_target - held[i]);
      for (size_t k = 0; k < n; ++k) run[k] = rng.Next();
      f->index.InsertRouterChain(f->ids[i], 0, std::span(run).first(n), Tier::kDevice);
      held[i] += n;
    }
  }
  return f;
}

Fleet& GetFleet(size_t targets, size_t blocks) {
  static std::unique_ptr<Fleet> fleet;
  if (!fleet || fleet->targets != targets || fleet->blocks != blocks) {
    fleet.reset();
    fleet = BuildFleet(targets, blocks);
  }
  return *fleet;
}

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void BM_Pick(benchmark::State& state) {
  Fleet& f = GetFleet(state.range(0), state.range(1));
  Selector selector(PolicyConfig{}, f.index);
  Random rng(42);
  std::vector<std::vector<TokenId>> requests;
  for (size_t q = 0; q < 2 * kConversations; ++q) {
    std::vector<TokenId> tokens = f.conversations[q % kConversations];
    const auto more = RandomTokens(rng, 4 * kBlockSize);
    tokens.insert(tokens.end(), more.begin(), more.end());
    requests.push_back(std::move(tokens));
  }
  std::deque<LoadState::ActiveGuard> inflight;
  std::vector<double> cpu_ns;
  size_t q = 0;
  for (auto _ : state) {
    RoutingInput input;
    input.request_id = "bench";
    input.tokens = std::span<const TokenId>(requests[q++ % requests.size()]);
    const int64_t t0 = ThreadCpuNs();
    absl::StatusOr<PickResult> pick = selector.Pick(input, f.ids);
    cpu_ns.push_back(static_cast<double>(ThreadCpuNs() - t0));
    if (!pick.ok()) {
      state.SkipWithError(std::string(pick.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(pick->picked);
    if (q % 2 == 0) pick->guard.PrefillDone();
    inflight.push_back(std::move(pick->guard));
    if (inflight.size() > kInFlight) inflight.pop_front();
  }
  std::sort(cpu_ns.begin(), cpu_ns.end());
  state.counters["p50_cpu_us"] = cpu_ns[cpu_ns.size() / 2] / 1e3;
  state.counters["p99_cpu_us"] =
      cpu_ns[std::min(cpu_ns.size() - 1, cpu_ns.size() * 99 / 100)] / 1e3;
}

BENCHMARK(BM_Pick)
    ->ArgNames({"targets", "blocks"})
    ->Args({64, 256})
    ->Args({4104, 2441})
    ->Iterations(4000)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infera::core

BENCHMARK_MAIN();
