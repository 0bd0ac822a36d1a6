#include "offline_command.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "bench_report.h"
#include "progress_bar.h"
#include "sim/engine_flags.h"
#include "sim/offline_simulator.h"
#include "sim/prefix_cache_bound.h"

namespace infera::bench {
namespace {

std::vector<RequestRecord> Records(const sim::OfflineResult& r) {
  std::vector<RequestRecord> out;
  out.reserve(r.requests.size());
  for (const sim::RequestOutcome& o : r.requests) {
    RequestRecord rec;
    rec.arrival_ns = o.arrival_ns;
    rec.first_token_ns = o.first_token_ns;
    rec.finish_ns = o.finish_ns;
    rec.prompt_tokens = o.prompt_tokens;
    rec.cached_tokens = o.cached_tokens;
    rec.output_tokens = o.output_tokens;
    rec.worker = static_cast<int32_t>(o.engine);
    rec.failed = o.rejected;
    out.push_back(rec);
  }
  return out;
}

}  // namespace

void AddOfflineFlags(CLI::App& app, OfflineFlags& f) {
  AddWorkloadFlags(app, f.workload);
  sim::AddEngineFlags(app, f.engine);
  app.add_option("--engines", f.engines, "simulated engines")->check(CLI::Range(1, 4096));
  app.add_option("--policies", f.policies,
                 "comma list: kv-aware[:overlap_weight], round-robin, random, least-load");
  app.add_option("--kv-recent-decay", f.recent_decay, "router recent-blocks decay")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--event-delay-ms", f.event_delay_ms, "KV event delivery delay (virtual ms)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--release-load-at", f.release_load_at,
                 "experiment: release a request's active blocks at its first token "
                 "(first-token) instead of its last (finish, what the router does)")
      ->check(CLI::IsMember({"finish", "first-token"}));
  app.add_option("--json", f.json_path, "write the JSON report here");
  app.add_option("--svg-dir", f.svg_dir, "write ttft_cdf.svg and load.svg here");
  app.add_option("--jobs", f.jobs, "simulations run in parallel")->check(CLI::Range(1, 64));
}

int RunOffline(const OfflineFlags& flags) {
  absl::StatusOr<std::vector<PolicySpec>> specs = ParsePolicySpecs(flags.policies);
  if (!specs.ok()) {
    std::fprintf(stderr, "infera-bench: %s\n", std::string(specs.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<sim::Workload> workload = BuildWorkload(flags.workload);
  if (!workload.ok()) {
    std::fprintf(stderr, "infera-bench: %s\n", std::string(workload.status().message()).c_str());
    return 2;
  }
  const size_t n = workload->requests.size();
  const size_t bs = flags.engine.block_size;

  Report report;
  report.mode = "offline";
  report.engines = flags.engines;
  report.num_gpu_blocks = flags.engine.num_gpu_blocks;
  report.block_size = bs;
  report.requests = n;
  report.prompt_tokens = workload->TotalPromptTokens();
  report.results.resize(specs->size());

  ProgressBar bar("simulating", static_cast<uint64_t>(n) * (specs->size() + 1));
  // Task 0 computes the bounds; task k >= 1 simulates policy k-1.
  std::mutex mu;
  size_t next_task = 0;
  auto run_task = [&](size_t task) {
    const auto start = std::chrono::steady_clock::now();
    if (task == 0) {
      sim::BoundRates b =
          sim::ComputeBounds(*workload, bs, flags.engines * flags.engine.num_gpu_blocks,
                             [&](size_t k) { bar.Add(k); });
      report.bound_hit_rate = b.pooled;
      report.infinite_hit_rate = b.infinite;
      return;
    }
    const PolicySpec& spec = (*specs)[task - 1];
    sim::OfflineConfig config;
    config.engines = flags.engines;
    config.engine = flags.engine;
    config.event_delay_ns = static_cast<int64_t>(flags.event_delay_ms * 1e6);
    config.release_load_at_first_token = flags.release_load_at == "first-token";
    config.policy.policy = *core::ParsePolicy(spec.name);
    config.policy.overlap_weight = spec.overlap_weight;
    config.policy.recent_decay = flags.recent_decay;
    config.policy.random_seed = 42;
    size_t reported = 0;
    sim::OfflineResult result = sim::RunOffline(*workload, config, [&](size_t done, size_t) {
      bar.Add(done - reported);
      reported = done;
    });
    PolicySummary& s = report.results[task - 1];
    // Bounds are filled in below once task 0 is done.
    s = SummarizeRun(spec.name, spec.name == "kv-aware" ? spec.overlap_weight : 0, Records(result),
                     flags.engines, 0, 0);
    for (size_t k = 0; k < result.sample_times_ns.size(); ++k) {
      s.load_times_s.push_back(result.sample_times_ns[k] / 1e9);
      s.load_per_worker.emplace_back(result.load_samples[k].begin(), result.load_samples[k].end());
    }
    s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const size_t tasks = specs->size() + 1;
  std::vector<std::thread> threads;
  for (size_t j = 0; j < std::min(flags.jobs, tasks); ++j) {
    threads.emplace_back([&] {
      while (true) {
        size_t task;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next_task >= tasks) return;
          task = next_task++;
        }
        run_task(task);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  bar.Finish();
  for (PolicySummary& s : report.results) {
    s.bound_share = report.bound_hit_rate > 0 ? s.hit_rate / report.bound_hit_rate : 0;
    s.infinite_share = report.infinite_hit_rate > 0 ? s.hit_rate / report.infinite_hit_rate : 0;
  }

  return EmitReport(report, flags.json_path, flags.svg_dir);
}

}  // namespace infera::bench
