// Benchmark results: per-policy summaries, the comparison table, the JSON report
// and the SVG plots written by infera-bench (doc/sim.md, "Report").
//
// Offline and online runs fill the same RequestRecord list, so both produce the
// same table and JSON schema:
//   {"mode": "offline"|"online", "engines": N, "num_gpu_blocks": B, "block_size": 16,
//    "requests": n, "prompt_tokens": n,
//    "bound_hit_rate": x, "infinite_hit_rate": x,
//    "results": [{"policy": "kv-aware", "overlap_weight": w, "hit_rate": x,
//                 "bound_share": x, "infinite_share": x,
//                 "ttft_ms": {"mean","p50","p99"}, "e2e_ms": {...}, "itl_ms": {...},
//                 "output_tok_s": x, "load_spread": x, "requests_per_worker": [...],
//                 "completed": n, "failed": n, "wall_s": x,
//                 "gap_closed": {"mean","p50","p99"}, "preemptions": n,
//                 "kv_util": {"mean","max","times_s":[...],"fleet":[...]},
//                 "goodput": {"time_scale","rps","ttft_p99_ms"}}, ...],
//    "ttft_floor_ms": {"mean","p50","p99"}, "slo_ttft_ms": x}
// The TTFT floor is each request's prefill alone on an idle engine with the pooled
// bound's hits (offline only; 0 online). gap_closed = (round-robin − policy) /
// (round-robin − floor) per statistic (0 without a round-robin result). Goodput is
// the highest arrival rate (requests / s of the workload's arrival span, found by
// bisection over the time scale) at which TTFT p99 <= slo_ttft_ms (absent when no
// SLO is given). kv_util is the engines' KV blocks in use / capacity, averaged over
// the fleet at each sample (offline: every engine; online: each --reset-engine's
// /metrics).
// Hit rates are fractions (cached prompt tokens / prompt tokens). load_spread is
// the coefficient of variation (stddev / mean) of the prompt tokens each worker
// was sent: 0 = perfectly even.
//
// Thread-safety: plain functions over values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace infera::bench {

// One request's measurements (times relative to the run's start).
struct RequestRecord {
  int64_t arrival_ns = 0;
  int64_t first_token_ns = -1;  // -1: no token
  int64_t finish_ns = -1;       // -1: did not complete
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  uint32_t output_tokens = 0;
  int32_t worker = -1;  // index into the run's worker list; -1 unknown
  bool failed = false;
  std::vector<double> itl_ms;  // gaps between streamed tokens (online only)
};

struct Latency {
  double mean = 0, p50 = 0, p99 = 0;
};

// Linear-interpolated percentile, q in [0, 1]. Empty input gives 0.
double Percentile(std::vector<double> values, double q);
Latency Summarize(const std::vector<double>& values);
// First tokens per second over the middle half of them: with the times sorted, the
// requests from the first quartile to the third over the time between them. Run past
// its capacity (arrivals faster than the fleet answers), this is the fleet's capacity
// under the policy, free of the run's empty start and of its last long prompts. 0 with
// fewer than 4 times or no time between the quartiles.
double MidFirstTokenRate(std::vector<int64_t> first_token_ns);

struct PolicySummary {
  std::string policy;  // "kv-aware", "round-robin", ...
  double overlap_weight = 0;
  size_t requests = 0, completed = 0, failed = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0;
  double hit_rate = 0;
  double bound_share = 0;     // hit_rate / bound_hit_rate (0 when the bound is 0)
  double infinite_share = 0;  // hit_rate / infinite_hit_rate
  Latency ttft_ms, e2e_ms, itl_ms;
  double output_tok_s = 0;
  double load_spread = 0;
  std::vector<uint64_t> requests_per_worker;
  std::vector<uint64_t> prompt_tokens_per_worker;
  double wall_s = 0;
  Latency gap_closed;        // share of the round-robin-to-floor TTFT gap
  int64_t preemptions = -1;  // -1: unknown
  double kv_util_mean = 0, kv_util_max = 0;
  std::vector<double> kv_util_fleet;  // per load sample, averaged over the workers
  // Goodput (set when an SLO is given and found).
  bool has_goodput = false;
  double goodput_time_scale = 0, goodput_rps = 0, goodput_ttft_p99_ms = 0;
  // For the plots.
  std::vector<double> ttft_samples_ms;
  std::vector<double> load_times_s;
  std::vector<std::vector<double>> load_per_worker;  // [sample][worker]
  // Mode-specific fields, written into the JSON result when not null (PD: "pd").
  nlohmann::json extra;
};

// Builds the summary of one run over `workers` workers.
PolicySummary SummarizeRun(const std::string& policy, double overlap_weight,
                           const std::vector<RequestRecord>& records, size_t workers,
                           double bound_hit_rate, double infinite_hit_rate);

struct Report {
  std::string mode;  // offline | online
  size_t engines = 0;
  size_t num_gpu_blocks = 0;
  size_t block_size = 16;
  size_t requests = 0;
  uint64_t prompt_tokens = 0;
  double bound_hit_rate = 0;
  double infinite_hit_rate = 0;
  Latency ttft_floor_ms;  // offline: no queueing, pooled-bound hits
  bool has_floor = false;
  double slo_ttft_ms = 0;  // 0: no goodput search
  std::vector<PolicySummary> results;
};

// Fills load_times_s / load_per_worker from the records (online: requests sent and
// not yet finished per worker, at `samples` evenly spaced times).
void LoadFromRecords(const std::vector<RequestRecord>& records, size_t workers, size_t samples,
                     PolicySummary& s);
// Fills each result's gap_closed from the round-robin result and the floor.
void ComputeGapClosed(Report& report);
// kv_util_mean / kv_util_max from kv_util_fleet.
void SummarizeKvUtil(PolicySummary& s);

nlohmann::json ReportJson(const Report& report);
// The comparison table (fixed-width text).
std::string FormatTable(const Report& report);
// TTFT distribution per policy (empirical CDF, log-scale time axis).
std::string TtftCdfSvg(const Report& report);
// Requests per worker over time, one panel per policy.
std::string LoadSvg(const Report& report);

// Prints the table to stdout and writes the JSON report and the SVGs where a path is
// given (empty: skipped). Returns 0, or 1 with a message on stderr if a write failed.
int EmitReport(const Report& report, const std::string& json_path, const std::string& svg_dir);

}  // namespace infera::bench
