// Per-pick cost of the router's PickPlanner::PlanMixed over a large fleet
// (doc/perf-scale.md "Pick cost at 4,104 targets"): the selector's pick plus the
// planner's share (candidate gathering, breaker claim, session, receipt, metrics).
//
//  * BM_PlanMixed/workers/cold: p50/p99 thread CPU time of one plan over `workers`
//    workers of 8 DP ranks each plus 8 single-rank workers (512: 4,104 targets), all
//    serving the request's model, beside 8 workers of another model and 8 decode-only
//    ones that the static filters drop. Index as bench/core/selector_bench.cc's (a
//    128-block system prefix on every target, 64 conversations of 512 blocks held by
//    1-3 targets, unrelated 64-block runs up to 2,441 blocks per target; 10.0M entries
//    at 4,104 targets); requests continue a conversation by 4 blocks; 256 plans stay in
//    flight. cold:1 writes a 64 MiB buffer between plans (not timed): the caches are
//    cold, as while the router ingests events.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/hashing.h"
#include "events/shared_kv_index.h"
#include "router/metrics/router_metrics.h"
#include "router/plan/pick_planner.h"
#include "spdlog/spdlog.h"
#include "testing/pick_workload.h"

namespace infera::router {
namespace {

using core::TargetId;
using core::TokenId;

constexpr size_t kBlocksPerTarget = 2441;
constexpr size_t kInFlight = 256;
constexpr uint32_t kRanks = 8;

struct Bed {
  size_t workers = 0;
  events::SharedKvIndex index;
  Fleet fleet;
  std::vector<TargetId> ids;  // targets serving the model
  std::vector<std::vector<TokenId>> conversations;
};

void AddWorker(Bed& b, size_t i, uint32_t ranks, const std::string& model,
               discovery::DisaggMode mode) {
  discovery::WorkerRecord r;
  r.worker_id = absl::StrCat("10.", i / 256, ".", i % 256, ".1:8000");
  r.url = absl::StrCat("http://", r.worker_id);
  r.model_name = model;
  r.dp_size = ranks;
  r.disagg_mode = mode;
  auto w = std::make_shared<FleetWorker>(r, *http::ParseHttpUrl(r.url));
  static std::atomic<uint64_t> counter{0};
  for (auto& role : w->picks) role.assign(ranks, &counter);
  for (uint32_t k = 0; k < ranks; ++k) {
    const TargetId t = b.index.WithWrite([&](core::KvIndex& index) {
      return index.AddTarget({r.worker_id, k}, testing::kPickBlockSize);
    });
    w->targets.push_back(t);
    if (model == "m" && mode == discovery::DisaggMode::kMixed) b.ids.push_back(t);
  }
  b.fleet.push_back(std::move(w));
}

Bed& GetBed(size_t workers) {
  static std::unique_ptr<Bed> bed;
  if (bed && bed->workers == workers) return *bed;
  bed.reset();
  bed = std::make_unique<Bed>();
  bed->workers = workers;
  size_t i = 0;
  for (size_t k = 0; k < workers; ++k)
    AddWorker(*bed, i++, kRanks, "m", discovery::DisaggMode::kMixed);
  for (size_t k = 0; k < 8; ++k) AddWorker(*bed, i++, 1, "m", discovery::DisaggMode::kMixed);
  for (size_t k = 0; k < 8; ++k) AddWorker(*bed, i++, 1, "other", discovery::DisaggMode::kMixed);
  for (size_t k = 0; k < 8; ++k) AddWorker(*bed, i++, 1, "m", discovery::DisaggMode::kDecode);
  bed->conversations = bed->index.WithWrite([&](core::KvIndex& index) {
    return testing::FillPickIndex(index, bed->ids, kBlocksPerTarget);
  });
  return *bed;
}

void BM_PlanMixed(benchmark::State& state) {
  spdlog::set_level(spdlog::level::warn);  // the pick log is off in production too
  Bed& b = GetBed(state.range(0));
  const bool cold = state.range(1) != 0;
  core::ManualClock clock(1);
  RouterMetrics metrics(core::Policy::kKvAware);
  PickPlanner planner(core::PolicyConfig{}, b.index, clock, metrics);
  const std::vector<std::vector<TokenId>> requests = testing::PickRequests(b.conversations);
  std::vector<char> thrash(cold ? size_t{64} << 20 : 0);
  std::deque<PickPlan> inflight;
  std::vector<double> cpu_ns;
  size_t q = 0;
  for (auto _ : state) {
    RequestContext ctx;
    ctx.request_id = "bench";
    ctx.api.model = "m";
    ctx.tokens = requests[q++ % requests.size()];
    PlanHistory history;
    if (cold) std::fill(thrash.begin(), thrash.end(), static_cast<char>(q));
    const int64_t t0 = testing::ThreadCpuNs();
    absl::StatusOr<PickPlan> plan = planner.PlanMixed(ctx, b.fleet, history);
    cpu_ns.push_back(static_cast<double>(testing::ThreadCpuNs() - t0));
    if (!plan.ok()) {
      state.SkipWithError(std::string(plan.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(plan->legs[0].target);
    if (q % 2 == 0) plan->guards.PrefillDone();
    inflight.push_back(*std::move(plan));
    if (inflight.size() > kInFlight) inflight.pop_front();
  }
  testing::SetPickCpuCounters(state, std::move(cpu_ns));
}

BENCHMARK(BM_PlanMixed)
    ->ArgNames({"workers", "cold"})
    ->Args({8, 0})
    ->Args({512, 0})
    ->Args({512, 1})
    ->Iterations(4000)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infera::router

BENCHMARK_MAIN();
