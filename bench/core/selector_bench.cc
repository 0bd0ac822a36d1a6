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
//    pruned:1 asks for the pruned pick (RoutingInput::exact_costs = false; the same
//    winners, doc/selection.md "Pruned pick"); counter `scored`: candidates scored in
//    full per pick (mean).
#include <benchmark/benchmark.h>

#include <deque>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/hashing.h"
#include "core/kv_index.h"
#include "core/selector.h"
#include "testing/pick_workload.h"

namespace infera::core {
namespace {

using testing::kPickBlockSize;
constexpr size_t kInFlight = 256;

struct Fleet {
  size_t targets = 0, blocks = 0;
  KvIndex index;
  std::vector<TargetId> ids;
  std::vector<std::vector<TokenId>> conversations;  // token ids
};

std::unique_ptr<Fleet> BuildFleet(size_t targets, size_t blocks_per_target) {
  auto f = std::make_unique<Fleet>();
  f->targets = targets;
  f->blocks = blocks_per_target;
  for (size_t i = 0; i < targets; ++i) {
    f->ids.push_back(f->index.AddTarget(
        {absl::StrCat("10.0.", i / 2048, ".", (i / 8) % 256, ":", 8000 + i % 8), 0},
        kPickBlockSize));
  }
  f->conversations = testing::FillPickIndex(f->index, f->ids, blocks_per_target);
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

void BM_Pick(benchmark::State& state) {
  Fleet& f = GetFleet(state.range(0), state.range(1));
  Selector selector(PolicyConfig{}, f.index);
  const std::vector<std::vector<TokenId>> requests = testing::PickRequests(f.conversations);
  std::deque<LoadState::ActiveGuard> inflight;
  std::vector<double> cpu_ns;
  size_t q = 0;
  double scored = 0;
  for (auto _ : state) {
    RoutingInput input;
    input.request_id = "bench";
    input.tokens = std::span<const TokenId>(requests[q++ % requests.size()]);
    input.exact_costs = state.range(2) == 0;
    const int64_t t0 = testing::ThreadCpuNs();
    absl::StatusOr<PickResult> pick = selector.Pick(input, f.ids);
    cpu_ns.push_back(static_cast<double>(testing::ThreadCpuNs() - t0));
    if (!pick.ok()) {
      state.SkipWithError(std::string(pick.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(pick->picked);
    scored += static_cast<double>(pick->scored);
    if (q % 2 == 0) pick->guard.PrefillDone();
    inflight.push_back(std::move(pick->guard));
    if (inflight.size() > kInFlight) inflight.pop_front();
  }
  testing::SetPickCpuCounters(state, std::move(cpu_ns));
  state.counters["scored"] = q > 0 ? scored / static_cast<double>(q) : 0;
}

BENCHMARK(BM_Pick)
    ->ArgNames({"targets", "blocks", "pruned"})
    ->Args({64, 256, 0})
    ->Args({64, 256, 1})
    ->Args({4104, 2441, 0})
    ->Args({4104, 2441, 1})
    ->Iterations(4000)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infera::core

BENCHMARK_MAIN();
