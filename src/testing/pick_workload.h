// The pick benches' shared workload (bench/core/selector_bench.cc,
// bench/router/pick_planner_bench.cc; doc/perf-scale.md "Pick cost at 4,104 targets"):
// the index a large fleet holds, the requests that continue its conversations, and the
// per-pick CPU figures. Header-only, bench and test use only.
//
// Index: a 128-block system prefix on every target, 64 conversations continuing it by
// 384 blocks held by 1-3 targets each, and unrelated 64-block runs up to
// `blocks_per_target` on every target. Requests: a conversation continued by 4 new blocks.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <span>
#include <vector>

#include "core/clock.h"
#include "core/hashing.h"
#include "core/kv_index.h"

namespace infera::testing {

inline constexpr size_t kPickBlockSize = 16;
inline constexpr size_t kPickPrefixBlocks = 128;
inline constexpr size_t kPickConversationBlocks = 512;  // prefix included
inline constexpr size_t kPickConversations = 64;

inline std::vector<core::TokenId> RandomTokens(core::Random& rng, size_t n) {
  std::vector<core::TokenId> out(n);
  for (auto& t : out) t = static_cast<core::TokenId>(rng.Uniform(50000));
  return out;
}

// Fills `ids`' views in `index` (seeded by the fleet's shape); returns the
// conversations' token ids.
inline std::vector<std::vector<core::TokenId>> FillPickIndex(core::KvIndex& index,
                                                             std::span<const core::TargetId> ids,
                                                             size_t blocks_per_target) {
  using core::BlockHash;
  const size_t n = ids.size();
  core::Random rng(n * 7919 + blocks_per_target);
  const std::vector<core::TokenId> prefix = RandomTokens(rng, kPickPrefixBlocks * kPickBlockSize);
  const std::vector<BlockHash> prefix_chain = core::HashChain(prefix, kPickBlockSize);
  std::vector<size_t> held(n, kPickPrefixBlocks);
  for (core::TargetId t : ids) index.InsertRouterChain(t, 0, prefix_chain, core::Tier::kDevice);
  std::vector<std::vector<core::TokenId>> conversations;
  for (size_t c = 0; c < kPickConversations; ++c) {
    std::vector<core::TokenId> tokens = prefix;
    const auto more =
        RandomTokens(rng, (kPickConversationBlocks - kPickPrefixBlocks) * kPickBlockSize);
    tokens.insert(tokens.end(), more.begin(), more.end());
    const std::vector<BlockHash> chain = core::HashChain(tokens, kPickBlockSize);
    const uint64_t r = rng.Uniform(10);
    const size_t holders = std::min<size_t>(n, r < 7 ? 1 : r < 9 ? 2 : 3);
    for (size_t k = 0; k < holders; ++k) {
      const size_t i = rng.Uniform(n);
      index.InsertRouterChain(ids[i], prefix_chain.back(),
                              std::span(chain).subspan(kPickPrefixBlocks), core::Tier::kDevice);
      held[i] += kPickConversationBlocks - kPickPrefixBlocks;
    }
    conversations.push_back(std::move(tokens));
  }
  std::vector<BlockHash> run(64);
  for (size_t i = 0; i < n; ++i) {
    while (held[i] < blocks_per_target) {
      const size_t m = std::min(run.size(), blocks_per_target - held[i]);
      for (size_t k = 0; k < m; ++k) run[k] = rng.Next();
      index.InsertRouterChain(ids[i], 0, std::span(run).first(m), core::Tier::kDevice);
      held[i] += m;
    }
  }
  return conversations;
}

// Two requests per conversation, each continuing it by 4 new blocks.
inline std::vector<std::vector<core::TokenId>> PickRequests(
    const std::vector<std::vector<core::TokenId>>& conversations) {
  core::Random rng(42);
  std::vector<std::vector<core::TokenId>> requests;
  for (size_t q = 0; q < 2 * conversations.size(); ++q) {
    std::vector<core::TokenId> tokens = conversations[q % conversations.size()];
    const auto more = RandomTokens(rng, 4 * kPickBlockSize);
    tokens.insert(tokens.end(), more.begin(), more.end());
    requests.push_back(std::move(tokens));
  }
  return requests;
}

inline int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The p50_cpu_us / p99_cpu_us counters over one run's per-pick CPU times.
inline void SetPickCpuCounters(benchmark::State& state, std::vector<double> cpu_ns) {
  if (cpu_ns.empty()) return;
  std::sort(cpu_ns.begin(), cpu_ns.end());
  state.counters["p50_cpu_us"] = cpu_ns[cpu_ns.size() / 2] / 1e3;
  state.counters["p99_cpu_us"] =
      cpu_ns[std::min(cpu_ns.size() - 1, cpu_ns.size() * 99 / 100)] / 1e3;
}

}  // namespace infera::testing
