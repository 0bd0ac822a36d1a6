#include "offline_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_split.h"
#include "bench_report.h"
#include "progress_bar.h"
#include "sim/engine_flags.h"
#include "sim/offline_simulator.h"
#include "sim/prefix_cache_bound.h"

namespace infera::bench {
namespace {

// `first_worker` is subtracted from each request's engine (PD: the decode engines).
std::vector<RequestRecord> Records(const sim::OfflineResult& r, uint32_t first_worker = 0) {
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
    rec.worker = static_cast<int32_t>(o.engine - first_worker);
    rec.failed = o.rejected || o.shed;
    out.push_back(rec);
  }
  return out;
}

double CoefficientOfVariation(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  var /= static_cast<double>(v.size());
  return mean > 0 ? std::sqrt(var) / mean : 0;
}

// Time-mean requests queued or running per engine in [first, first + count).
std::vector<double> MeanLoads(const sim::OfflineResult& r, size_t first, size_t count) {
  std::vector<double> mean(count, 0);
  for (const std::vector<uint32_t>& sample : r.load_samples) {
    for (size_t e = 0; e < count; ++e) mean[e] += sample[first + e];
  }
  for (double& m : mean) m /= std::max<size_t>(1, r.load_samples.size());
  return mean;
}

// Mean over the load samples of the CV across engines [first, first + count) at that
// moment (samples where they are all idle are skipped): the typical instantaneous
// imbalance.
double MeanInstantSpread(const sim::OfflineResult& r, size_t first, size_t count) {
  double sum = 0;
  size_t n = 0;
  std::vector<double> now(count);
  for (const std::vector<uint32_t>& sample : r.load_samples) {
    double total = 0;
    for (size_t e = 0; e < count; ++e) total += now[e] = sample[first + e];
    if (total == 0) continue;
    sum += CoefficientOfVariation(now);
    ++n;
  }
  return n > 0 ? sum / static_cast<double>(n) : 0;
}

// The PD part of one run's JSON result: {"pd": {...}}.
nlohmann::json PdSummary(const sim::OfflineResult& r, const OfflineFlags& f) {
  const size_t p = f.prefill_engines, d = f.decode_engines;
  std::vector<uint64_t> prefill_requests(p, 0);
  std::vector<double> transfer_ms;
  uint64_t decode_only = 0;
  for (const sim::RequestOutcome& o : r.requests) {
    if (o.decode_only) ++decode_only;
    if (o.prefill_engine >= 0) {
      ++prefill_requests[static_cast<size_t>(o.prefill_engine)];
      transfer_ms.push_back(o.transfer_ns / 1e6);
    }
  }
  const Latency transfer = Summarize(transfer_ms);
  const std::vector<double> decode_load = MeanLoads(r, p, d);
  const std::vector<double> prefill_load = MeanLoads(r, 0, p);
  return {
      {"pd",
       {{"prefill_engines", p},
        {"decode_engines", d},
        {"min_uncached_tokens", f.pd_min_uncached_tokens},
        {"decode_only", decode_only},
        {"transfer_ms", {{"mean", transfer.mean}, {"p50", transfer.p50}, {"p99", transfer.p99}}},
        {"prefill_requests_per_worker", prefill_requests},
        {"decode_mean_load_per_worker", decode_load},
        {"decode_load_spread", CoefficientOfVariation(decode_load)},
        {"decode_instant_spread", MeanInstantSpread(r, p, d)},
        {"prefill_instant_spread", MeanInstantSpread(r, 0, p)},
        {"prefill_load_spread", CoefficientOfVariation(prefill_load)}}}};
}

// One --decode-input-demand variant: mode and request-count weight.
struct DemandVariant {
  core::DemandMode mode = core::DemandMode::kOff;
  double weight = 0;
  std::string label;  // "" for off, else " demand=on" / " demand=on:W"
};

absl::StatusOr<std::vector<DemandVariant>> ParseDemandVariants(const std::string& list) {
  std::vector<DemandVariant> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    start = comma + 1;
    const size_t colon = item.find(':');
    auto mode = core::ParseDemandMode(item.substr(0, colon));
    if (!mode.ok()) return mode.status();
    DemandVariant v;
    v.mode = *mode;
    if (colon != std::string::npos) {
      char* end = nullptr;
      const std::string w = item.substr(colon + 1);
      v.weight = std::strtod(w.c_str(), &end);
      if (w.empty() || *end != '\0' || !std::isfinite(v.weight) || v.weight < 0 ||
          v.mode == core::DemandMode::kOff) {
        return absl::InvalidArgumentError("--decode-input-demand: '" + item +
                                          "' (want off, shadow[:W] or on[:W], W >= 0)");
      }
    }
    if (v.mode != core::DemandMode::kOff) v.label = " demand=" + item;
    out.push_back(v);
  }
  return out;
}

// Decode input demand's measures of one PD run, over the load samples where some decode
// engine holds a booked request: the in-flight input-token spread across decode engines
// (time-mean of the per-sample CV; token-weighted: sum of per-sample standard deviations
// over sum of means; time-mean of max/mean); the decode step time of every decode step
// (the timing model's) mean and p99; and the busiest-rank step: per sample, the timing
// model's decode step at the highest KV occupancy among the decode engines (what a DP-
// attention step waits for), mean and p99.
nlohmann::json DemandSummary(const sim::OfflineResult& r, const DemandVariant& v, size_t prefill,
                             const sim::TimingModel& timing) {
  double cv_sum = 0, max_over_mean_sum = 0, std_sum = 0, mean_sum = 0;
  size_t busy = 0;
  std::vector<double> now, busiest_ms;
  for (size_t k = 0; k < r.decode_input_samples.size(); ++k) {
    const std::vector<uint64_t>& sample = r.decode_input_samples[k];
    now.assign(sample.begin(), sample.end());
    double total = 0, top = 0;
    for (double x : now) total += x, top = std::max(top, x);
    if (total == 0) continue;
    const double mean = total / static_cast<double>(now.size());
    const double cv = CoefficientOfVariation(now);
    cv_sum += cv;
    std_sum += cv * mean;
    mean_sum += mean;
    max_over_mean_sum += top / mean;
    ++busy;
    double occupancy = 0;
    for (size_t e = prefill; e < r.kv_samples[k].size(); ++e) {
      occupancy = std::max(occupancy, static_cast<double>(r.kv_samples[k][e]));
    }
    busiest_ms.push_back(timing.DecodeMs(occupancy) / timing.speedup);
  }
  const Latency busiest = Summarize(busiest_ms);
  std::vector<double> step_ms;
  step_ms.reserve(r.decode_step_ns.size());
  for (int64_t ns : r.decode_step_ns) step_ms.push_back(ns / 1e6);
  const Latency step = Summarize(step_ms);
  const double b = static_cast<double>(std::max<size_t>(busy, 1));
  return {{"mode", core::DemandModeName(v.mode)},
          {"request_weight", v.weight},
          {"decode_input_spread", cv_sum / b},
          {"decode_input_spread_token_weighted", mean_sum > 0 ? std_sum / mean_sum : 0},
          {"busiest_rank_step_ms", {{"mean", busiest.mean}, {"p99", busiest.p99}}},
          {"decode_input_max_over_mean", max_over_mean_sum / b},
          {"decode_step_ms", {{"mean", step.mean}, {"p50", step.p50}, {"p99", step.p99}}},
          {"decisions", r.demand_decisions},
          {"agreements", r.demand_agreements}};
}

// The workload with every arrival multiplied by `factor` (> 0).
sim::Workload Rescaled(const sim::Workload& w, double factor) {
  sim::Workload out = w;
  for (sim::WorkloadRequest& r : out.requests) {
    r.arrival_ns = static_cast<int64_t>(std::llround(static_cast<double>(r.arrival_ns) * factor));
  }
  return out;
}

double TtftP99Ms(const sim::OfflineResult& r) {
  std::vector<double> ttft;
  ttft.reserve(r.requests.size());
  for (const sim::RequestOutcome& o : r.requests) {
    // A rejected request never gets a token: it counts as an SLO miss.
    ttft.push_back(o.first_token_ns < 0 ? 1e18 : (o.first_token_ns - o.arrival_ns) / 1e6);
  }
  return Percentile(std::move(ttft), 0.99);
}

struct Goodput {
  bool found = false;
  double factor = 0;  // arrival multiplier relative to the given workload
  double ttft_p99_ms = 0;
};

// The smallest arrival multiplier (highest rate) at which TTFT p99 <= slo: doubles or
// halves from 1 until the SLO is bracketed (at most 8 times), then `steps` bisections
// in log space. Rates are monotone in practice, not by construction.
Goodput SearchGoodput(const sim::Workload& w, const sim::OfflineConfig& config, double slo_ms,
                      size_t steps) {
  auto p99_at = [&](double f) { return TtftP99Ms(sim::RunOffline(Rescaled(w, f), config)); };
  Goodput g;
  double ok = 0, bad = 0, ok_p99 = 0;
  double p = p99_at(1.0);
  if (p <= slo_ms) {
    ok = 1.0, ok_p99 = p;
    for (int i = 0; i < 8 && bad == 0; ++i) {
      const double f = ok / 2;
      p = p99_at(f);
      if (p <= slo_ms) {
        ok = f, ok_p99 = p;
      } else {
        bad = f;
      }
    }
    if (bad == 0) return {true, ok, ok_p99};  // meets the SLO at every rate tried
  } else {
    bad = 1.0;
    for (int i = 0; i < 8 && ok == 0; ++i) {
      const double f = bad * 2;
      p = p99_at(f);
      if (p <= slo_ms) {
        ok = f, ok_p99 = p;
      } else {
        bad = f;
      }
    }
    if (ok == 0) return g;  // misses it even at 1/256 of the rate
  }
  for (size_t i = 0; i < steps; ++i) {
    const double f = std::sqrt(ok * bad);
    p = p99_at(f);
    if (p <= slo_ms) {
      ok = f, ok_p99 = p;
    } else {
      bad = f;
    }
  }
  return {true, ok, ok_p99};
}

// TTFT of each request alone on an idle engine with the pooled bound's hits.
Latency TtftFloor(const sim::Workload& w, const std::vector<uint32_t>& pooled_hits,
                  const sim::EngineConfig& engine) {
  std::vector<double> floor;
  floor.reserve(w.requests.size());
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const size_t prompt = w.requests[i].prompt_tokens;
    const size_t hits = i < pooled_hits.size() ? pooled_hits[i] : 0;
    floor.push_back(engine.timing.IdlePrefillNs(prompt - std::min(prompt, hits),
                                                engine.max_num_batched_tokens) /
                    1e6);
  }
  return Summarize(floor);
}

// Requests answered (not shed, not refused) and those whose TTFT met 2 s and 3 s,
// with the arrival span: goodput at an SLO = attained / span (every request counts,
// a shed or refused one as a miss); and the rate the fleet answered at (its
// capacity when the arrivals outrun it: MidFirstTokenRate).
nlohmann::json SloSummary(const sim::OfflineResult& r) {
  uint64_t answered = 0, within_2s = 0, within_3s = 0;
  int64_t first = INT64_MAX, last = INT64_MIN;
  std::vector<int64_t> first_tokens;
  first_tokens.reserve(r.requests.size());
  for (const sim::RequestOutcome& o : r.requests) {
    first = std::min(first, o.arrival_ns);
    last = std::max(last, o.arrival_ns);
    if (o.shed || o.rejected || o.first_token_ns < 0) continue;
    ++answered;
    first_tokens.push_back(o.first_token_ns);
    const int64_t ttft = o.first_token_ns - o.arrival_ns;
    within_2s += ttft <= 2'000'000'000 ? 1 : 0;
    within_3s += ttft <= 3'000'000'000 ? 1 : 0;
  }
  const double span_s = r.requests.empty() ? 0 : (last - first) / 1e9;
  const double n = static_cast<double>(std::max<size_t>(1, r.requests.size()));
  return {{"requests", r.requests.size()},
          {"answered", answered},
          {"answered_share", answered / n},
          {"within_2s", within_2s},
          {"within_3s", within_3s},
          {"span_s", span_s},
          {"goodput_2s_rps", span_s > 0 ? within_2s / span_s : 0},
          {"goodput_3s_rps", span_s > 0 ? within_3s / span_s : 0},
          {"served_mid_rps", MidFirstTokenRate(std::move(first_tokens))}};
}

// The most common first segment (a system prompt): how many engines served it and the
// busiest one's share of its requests (hot-prefix replication, issue 25).
nlohmann::json HotPrefixSummary(const sim::Workload& w, const sim::OfflineResult& r) {
  absl::flat_hash_map<uint64_t, size_t> count;
  for (const sim::WorkloadRequest& q : w.requests) {
    if (!q.segments.empty()) ++count[q.segments[0].seed];
  }
  uint64_t hot = 0;
  size_t most = 0;
  for (const auto& [seed, n] : count) {
    if (n > most || (n == most && seed < hot)) hot = seed, most = n;
  }
  absl::flat_hash_map<uint32_t, size_t> per_engine;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const sim::WorkloadRequest& q = w.requests[i];
    if (q.segments.empty() || q.segments[0].seed != hot || r.requests[i].shed) continue;
    ++per_engine[r.requests[i].prefill_engine >= 0
                     ? static_cast<uint32_t>(r.requests[i].prefill_engine)
                     : r.requests[i].engine];
  }
  size_t top = 0;
  for (const auto& [e, n] : per_engine) top = std::max(top, n);
  return {{"requests", most},
          {"share_of_workload", static_cast<double>(most) / std::max<size_t>(1, w.requests.size())},
          {"engines", per_engine.size()},
          {"busiest_engine_share", most > 0 ? static_cast<double>(top) / most : 0}};
}

nlohmann::json QueueSummary(const sim::OfflineResult& r) {
  const core::QueueStats& q = r.queue;
  std::vector<double> waits;
  for (const sim::RequestOutcome& o : r.requests) {
    if (!o.shed) waits.push_back(o.queue_ns / 1e6);
  }
  const Latency w = Summarize(waits);
  return {{"bound_now", q.bound_now},
          {"queued", q.queued},
          {"rejected_full", q.rejected_full},
          {"expired", q.expired},
          {"released", q.released},
          {"wait_ms", {{"mean", w.mean}, {"p99", w.p99}}},
          {"max_wait_ms", q.max_wait_ns / 1e6}};
}

}  // namespace

void AddOfflineFlags(CLI::App& app, OfflineFlags& f) {
  AddWorkloadFlags(app, f.workload);
  sim::AddEngineFlags(app, f.engine);
  app.add_option("--engines", f.engines, "simulated engines")->check(CLI::Range(1, 4096));
  app.add_option("--policies", f.policies,
                 "comma list: kv-aware[:overlap_weight], round-robin, random, least-load, "
                 "dynamo, lmetric, llm-d, sglang, ttft-oracle (a bound: doc/sim.md)");
  app.add_option("--kv-recent-decay", f.recent_decay, "router recent-blocks decay")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--load-term", f.load_term,
                 "router load term: work (pending prefill + KV pressure) or spec "
                 "(active blocks until completion + recent blocks)")
      ->check(CLI::IsMember({"work", "spec"}));
  app.add_option("--capacity", f.capacity,
                 "whether the router knows each engine's num_gpu_blocks (known) or learns "
                 "it from the events (learned)")
      ->check(CLI::IsMember({"known", "learned"}));
  app.add_option("--kv-pressure-threshold", f.kv_pressure_threshold,
                 "work load term: KV use (fraction of capacity) above which blocks cost")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--kv-pressure-slope", f.kv_pressure_slope,
                 "work load term: cost per in-flight block above the threshold")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--kv-pressure-yield", f.kv_pressure_yield,
                 "work load term: a mixed or prefill pick drops the KV-pressure term when "
                 "every candidate is past its threshold (true/false)")
      ->capture_default_str();
  app.add_option("--load-queue-scaling", f.load_queue_scaling,
                 "kv-aware, work term: divide the load term by 1 + the candidates' mean "
                 "requests in prefill (true/false)")
      ->capture_default_str();
  app.add_option("--kv-decode-load", f.decode_load_blocks,
                 "work load term: blocks of cost of a KV capacity full of in-flight requests' "
                 "prompt blocks (the decode step's share of a new request's wait; 0: off)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--kv-seq-wait-load", f.seq_wait_blocks,
                 "work load term: blocks of cost per request a new one would wait behind "
                 "for a sequence slot on an engine at its max_num_seqs (0: off)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--kv-timed-prefill", f.timed_prefill,
                 "work load term: count each pending prefill less the progress its time since "
                 "dispatch buys at the engine's learned prefill rate (a FIFO queue; true/false)")
      ->capture_default_str();
  app.add_option("--kv-prefill-rate", f.prefill_rate,
                 "--kv-timed-prefill: the learned prefill rate's seed, blocks per second")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--kv-timed-prefill-floor", f.timed_prefill_floor,
                 "--kv-timed-prefill: the share of a dispatched prefill's missed blocks counted "
                 "until it is confirmed, however long ago it was dispatched (0-1)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--kv-inflight-credit", f.inflight_credit,
                 "kv-aware: weight of an engine's in-flight run of the prompt (blocks past its "
                 "view's hits that its in-flight requests hold), credited as hits (0: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--kv-inflight-holders", f.inflight_credit_holders,
                 "kv-aware: the in-flight run is credited while fewer than this many "
                 "in-flight requests on the engine hold the prompt's first block")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--kv-inflight-share-window", f.inflight_share_window,
                 "kv-aware: the in-flight run is credited only while the prompt's first block "
                 "was that of at most this many / engines of the last this many picks (a "
                 "prompt one engine can serve; 0: no gate)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  app.add_option("--slo-ttft-ms", f.slo_ttft_ms,
                 "search each policy's goodput: the highest arrival rate (bisection over "
                 "the time scale) with TTFT p99 <= this")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--goodput-steps", f.goodput_steps, "bisection steps of the goodput search")
      ->check(CLI::Range(0, 20));
  app.add_option("--event-delay-ms", f.event_delay_ms, "KV event delivery delay (virtual ms)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--approx-ttl-s", f.approx_ttl_s,
                 "Approximate mode (as infera-router --kv-event-transport none): no KV events, "
                 "each kv-aware pick predicts its prompt cached for this long (0: exact mode)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--approx-max-blocks", f.approx_max_blocks,
                 "Approximate mode: predicted blocks kept per engine")
      ->check(CLI::PositiveNumber);
  app.add_option("--release-load-at", f.release_load_at,
                 "experiment: release a request's active blocks at its first token "
                 "(first-token) instead of its last (finish, what the router does)")
      ->check(CLI::IsMember({"finish", "first-token"}));
  app.add_option("--json", f.json_path, "write the JSON report here");
  app.add_option("--svg-dir", f.svg_dir, "write ttft_cdf.svg and load.svg here");
  app.add_option("--jobs", f.jobs, "simulations run in parallel")->check(CLI::Range(1, 64));
  app.add_option("--prefill-engines", f.prefill_engines,
                 "PD fleet: prefill engines (with --decode-engines; replaces --engines)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--decode-engines", f.decode_engines, "PD fleet: decode engines")
      ->check(CLI::Range(1, 4096));
  app.add_option("--decode-input-demand", f.decode_input_demand,
                 "PD: decode input-demand variants run against every policy, comma list of "
                 "off | shadow[:W] | on[:W] (W: --decode-request-weight), e.g. "
                 "off,shadow,on,on:1000000")
      ->capture_default_str();
  app.add_option("--pd-min-uncached-tokens", f.pd_min_uncached_tokens,
                 "PD: keep a request on the decode engine when the best prefill engine would "
                 "compute fewer uncached tokens (0 = always disaggregate)");
  app.add_option("--admission-queue", f.admission_queue,
                 "admission queue variants run against every kv-aware policy (the peers run "
                 "without): comma list of auto | off | on (auto, the router's default: on for a "
                 "mixed fleet, off for a PD fleet, labelled as the policy alone; doc/admission.md)")
      ->capture_default_str();
  app.add_option("--queue-threshold-blocks", f.queue_threshold_blocks,
                 "admission queue: hold arrivals while every engine's load is at least this "
                 "(blocks of prefill work)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--queue-join-blocks", f.queue_join_blocks,
                 "admission queue: past this load a cold prompt that requests in flight "
                 "would make half cached waits for them, and a prompt half cached somewhere "
                 "binds at once (blocks of prefill work; 0 = off; doc/admission.md \"Hold "
                 "rule\")")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--queue-max", f.queue_max, "admission queue: waiting requests (more: 429)")
      ->capture_default_str();
  app.add_option("--queue-max-wait-s", f.queue_max_wait_s,
                 "admission queue: a request held this long is shed (429; 0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sim::AddKvTransferFlags(app, f.kv_transfer);
}

int RunOffline(const OfflineFlags& flags) {
  absl::StatusOr<std::vector<PolicySpec>> specs = ParsePolicySpecs(flags.policies);
  if (!specs.ok()) {
    std::fprintf(stderr, "infera-bench: %s\n", std::string(specs.status().message()).c_str());
    return 2;
  }
  for (const PolicySpec& s : *specs) {
    if (s.name == kTtftOracle && flags.prefill_engines > 0 && flags.decode_engines > 0) {
      std::fprintf(stderr, "infera-bench: %s needs a mixed fleet (not --prefill-engines / "
                   "--decode-engines)\n", kTtftOracle);
      return 2;
    }
  }
  absl::StatusOr<std::vector<DemandVariant>> variants =
      ParseDemandVariants(flags.decode_input_demand);
  if (!variants.ok()) {
    std::fprintf(stderr, "infera-bench: %s\n", std::string(variants.status().message()).c_str());
    return 2;
  }
  for (const DemandVariant& v : *variants) {
    const bool pd_fleet = flags.prefill_engines > 0 && flags.decode_engines > 0;
    if (v.mode == core::DemandMode::kOff) continue;
    if (!pd_fleet) {
      std::fprintf(stderr, "infera-bench: --decode-input-demand needs a PD fleet\n");
      return 2;
    }
    for (const PolicySpec& s : *specs) {
      if (s.name != "kv-aware") {
        std::fprintf(stderr,
                     "infera-bench: --decode-input-demand shadow|on requires kv-aware policies "
                     "(not %s)\n",
                     s.name.c_str());
        return 2;
      }
    }
  }
  absl::StatusOr<sim::Workload> workload = BuildWorkload(flags.workload);
  if (!workload.ok()) {
    std::fprintf(stderr, "infera-bench: %s\n", std::string(workload.status().message()).c_str());
    return 2;
  }
  const size_t n = workload->requests.size();
  const size_t bs = flags.engine.block_size;
  const bool pd = flags.prefill_engines > 0 || flags.decode_engines > 0;
  if (pd && (flags.prefill_engines == 0 || flags.decode_engines == 0)) {
    std::fprintf(stderr,
                 "infera-bench: a PD fleet needs both --prefill-engines and "
                 "--decode-engines\n");
    return 2;
  }
  const size_t engines = pd ? flags.prefill_engines + flags.decode_engines : flags.engines;
  // The prefill hit rate's pooled bound is the prefill pool's capacity.
  const size_t bound_engines = pd ? flags.prefill_engines : flags.engines;

  Report report;
  report.mode = "offline";
  report.engines = engines;
  report.num_gpu_blocks = flags.engine.num_gpu_blocks;
  report.block_size = bs;
  report.requests = n;
  report.prompt_tokens = workload->TotalPromptTokens();
  // Admission queue variants apply to kv-aware policies only.
  std::vector<std::string> queue_variants;
  for (const std::string& v :
       std::vector<std::string>(absl::StrSplit(flags.admission_queue, ',', absl::SkipEmpty()))) {
    if (v != "off" && v != "on" && v != "auto") {
      std::fprintf(stderr, "infera-bench: --admission-queue: '%s' (want auto, off or on)\n",
                   v.c_str());
      return 2;
    }
    queue_variants.push_back(v);
  }
  if (queue_variants.empty()) queue_variants.push_back("off");
  struct Run {
    size_t spec = 0, variant = 0;
    bool queue = false;
    bool labelled = false;  // "+queue" in the label: asked for by name (on)
  };
  std::vector<Run> plan;
  for (size_t k = 0; k < specs->size(); ++k) {
    for (size_t v = 0; v < variants->size(); ++v) {
      bool off_done = false;
      for (const std::string& q : queue_variants) {
        // auto, as the router's: on for kv-aware's mixed pools, off for a PD fleet's
        // prefill pool (on turns it on there too).
        const bool on = (q == "on" || (q == "auto" && !pd)) && (*specs)[k].name == "kv-aware";
        if (!on && off_done) continue;
        off_done = off_done || !on;
        // auto is unlabelled (the default) unless it runs beside another variant.
        plan.push_back({k, v, on, on && (q == "on" || queue_variants.size() > 1)});
      }
    }
  }
  const size_t runs = plan.size();
  report.results.resize(runs);

  ProgressBar bar("simulating", static_cast<uint64_t>(n) * (runs + 1));
  // Task 0 computes the bounds; task k >= 1 simulates policy k-1.
  std::mutex mu;
  size_t next_task = 0;
  auto run_task = [&](size_t task) {
    const auto start = std::chrono::steady_clock::now();
    if (task == 0) {
      sim::BoundRates b =
          sim::ComputeBounds(*workload, bs, bound_engines * flags.engine.num_gpu_blocks,
                             [&](size_t k) { bar.Add(k); });
      report.bound_hit_rate = b.pooled;
      report.infinite_hit_rate = b.infinite;
      report.ttft_floor_ms = TtftFloor(*workload, b.pooled_hit_tokens, flags.engine);
      report.has_floor = true;
      return;
    }
    const Run& run = plan[task - 1];
    const PolicySpec& spec = (*specs)[run.spec];
    const DemandVariant& variant = (*variants)[run.variant];
    sim::OfflineConfig config;
    config.admission_queue = run.queue;
    config.queue_threshold_blocks = flags.queue_threshold_blocks;
    config.queue_join_blocks = flags.queue_join_blocks;
    config.queue.max_queued = flags.queue_max;
    config.queue.max_wait_ns = static_cast<int64_t>(flags.queue_max_wait_s * 1e9);
    config.decode_demand = variant.mode;
    config.decode_request_weight = variant.weight;
    config.engines = flags.engines;
    config.engine = flags.engine;
    config.event_delay_ns = static_cast<int64_t>(flags.event_delay_ms * 1e6);
    config.approx.ttl_ns = static_cast<int64_t>(flags.approx_ttl_s * 1e9);
    config.approx.max_blocks = flags.approx_max_blocks;
    config.release_load_at_first_token = flags.release_load_at == "first-token";
    config.ttft_oracle = spec.name == kTtftOracle;  // books through round-robin
    config.policy.policy =
        config.ttft_oracle ? core::Policy::kRoundRobin : *core::ParsePolicy(spec.name);
    config.policy.overlap_weight = spec.overlap_weight;
    if (spec.decode_overlap_weight) {
      config.policy.prefill_overlap_weight = spec.overlap_weight;
      config.policy.decode_overlap_weight = *spec.decode_overlap_weight;
    }
    config.prefill_engines = flags.prefill_engines;
    config.decode_engines = flags.decode_engines;
    config.pd.min_uncached_tokens = flags.pd_min_uncached_tokens;
    config.kv_transfer = flags.kv_transfer;
    config.policy.recent_decay = flags.recent_decay;
    config.policy.load_term = *core::ParseLoadTerm(flags.load_term);
    config.policy.kv_pressure_threshold = flags.kv_pressure_threshold;
    config.policy.kv_pressure_slope = flags.kv_pressure_slope;
    config.policy.load_queue_scaling = flags.load_queue_scaling;
    config.policy.decode_load_blocks = flags.decode_load_blocks;
    config.policy.seq_wait_blocks = flags.seq_wait_blocks;
    config.policy.timed_prefill = flags.timed_prefill;
    config.policy.kv_pressure_yield = flags.kv_pressure_yield;
    config.policy.prefill_rate = flags.prefill_rate;
    config.policy.timed_prefill_floor = flags.timed_prefill_floor;
    config.policy.inflight_credit = flags.inflight_credit;
    config.policy.inflight_credit_holders = flags.inflight_credit_holders;
    config.policy.inflight_share_window = flags.inflight_share_window;
    config.policy.random_seed = 42;
    config.capacity_known = flags.capacity == "known";
    size_t reported = 0;
    sim::OfflineResult result = sim::RunOffline(*workload, config, [&](size_t done, size_t) {
      bar.Add(done - reported);
      reported = done;
    });
    PolicySummary& s = report.results[task - 1];
    // Bounds are filled in below once task 0 is done.
    // PD: the workers of the summary are the decode engines (they serve the response).
    const uint32_t first = pd ? static_cast<uint32_t>(flags.prefill_engines) : 0;
    std::string label = spec.name;
    if (spec.decode_overlap_weight) {  // per-role weights: "kv-aware:20/2"
      char weights[64];
      std::snprintf(weights, sizeof weights, ":%g/%g", spec.overlap_weight,
                    *spec.decode_overlap_weight);
      label += weights;
    }
    label += variant.label;
    if (run.labelled) label += "+queue";
    s = SummarizeRun(label, spec.name == "kv-aware" ? spec.overlap_weight : 0,
                     Records(result, first), engines - first, 0, 0);
    if (pd) {
      s.extra = PdSummary(result, flags);
      s.extra["pd"]["decode_demand"] =
          DemandSummary(result, variant, flags.prefill_engines, flags.engine.timing);
    }
    for (size_t k = 0; k < result.sample_times_ns.size(); ++k) {
      s.load_times_s.push_back(result.sample_times_ns[k] / 1e9);
      s.load_per_worker.emplace_back(result.load_samples[k].begin() + first,
                                     result.load_samples[k].end());
      double kv = 0;
      for (float v : result.kv_samples[k]) kv += v;
      s.kv_util_fleet.push_back(
          result.kv_samples[k].empty() ? 0 : kv / static_cast<double>(result.kv_samples[k].size()));
    }
    SummarizeKvUtil(s);
    s.extra["slo"] = SloSummary(result);
    s.extra["hot_prefix"] = HotPrefixSummary(*workload, result);
    if (run.queue) s.extra["admission"] = QueueSummary(result);
    s.preemptions = 0;
    for (const sim::EngineStats& e : result.engine_stats) s.preemptions += e.preemptions;
    if (flags.slo_ttft_ms > 0) {
      const Goodput g = SearchGoodput(*workload, config, flags.slo_ttft_ms, flags.goodput_steps);
      s.has_goodput = g.found;
      if (g.found) {
        const double span_s =
            (workload->requests.back().arrival_ns - workload->requests.front().arrival_ns) *
            g.factor / 1e9;
        s.goodput_time_scale = flags.workload.mooncake.time_scale * g.factor;
        s.goodput_rps = span_s > 0 ? static_cast<double>(n) / span_s : 0;
        s.goodput_ttft_p99_ms = g.ttft_p99_ms;
      }
    }
    s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const size_t tasks = runs + 1;
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
  report.slo_ttft_ms = flags.slo_ttft_ms;
  ComputeGapClosed(report);

  const int code = EmitReport(report, flags.json_path, flags.svg_dir);
  std::printf(
      "SLO (every request; shed or refused = miss): answered %%, TTFT <= 2 s / 3 s "
      "(%% of requests, req/s of the arrival span); served: first tokens / s over their middle "
      "half\n");
  for (const PolicySummary& s : report.results) {
    const nlohmann::json& j = s.extra["slo"];
    std::printf("  %-24s answered %5.1f%%  <=2s %5.1f%% %7.3f/s  <=3s %5.1f%% %7.3f/s",
                s.policy.c_str(), 100 * j["answered_share"].get<double>(),
                100.0 * j["within_2s"].get<double>() / std::max(1.0, j["requests"].get<double>()),
                j["goodput_2s_rps"].get<double>(),
                100.0 * j["within_3s"].get<double>() / std::max(1.0, j["requests"].get<double>()),
                j["goodput_3s_rps"].get<double>());
    std::printf("  served %7.3f/s", j["served_mid_rps"].get<double>());
    const nlohmann::json& h = s.extra["hot_prefix"];
    std::printf("  hot prefix (%.0f%% of requests): %zu engines, busiest %.0f%%",
                100 * h["share_of_workload"].get<double>(), h["engines"].get<size_t>(),
                100 * h["busiest_engine_share"].get<double>());
    if (s.extra.contains("admission")) {
      const nlohmann::json& a = s.extra["admission"];
      std::printf("  queue: held %llu, shed full %llu / expired %llu, wait mean %.0f p99 %.0f ms",
                  a["queued"].get<unsigned long long>(),
                  a["rejected_full"].get<unsigned long long>(),
                  a["expired"].get<unsigned long long>(), a["wait_ms"]["mean"].get<double>(),
                  a["wait_ms"]["p99"].get<double>());
    }
    std::printf("\n");
  }
  if (pd) {
    std::printf("PD fleet: %zu prefill + %zu decode engines, --pd-min-uncached-tokens %llu\n",
                flags.prefill_engines, flags.decode_engines,
                static_cast<unsigned long long>(flags.pd_min_uncached_tokens));
    for (const PolicySummary& s : report.results) {
      const nlohmann::json& j = s.extra["pd"];
      std::string label = s.policy;
      if (s.policy == "kv-aware") label += " w=" + std::to_string(s.overlap_weight).substr(0, 5);
      std::printf(
          "  %-18s decode-only %6llu  transfer mean %7.2f ms  decode spread time-mean %.3f "
          "instant %.3f  prefill spread time-mean %.3f instant %.3f\n",
          label.c_str(), j["decode_only"].get<unsigned long long>(),
          j["transfer_ms"]["mean"].get<double>(), j["decode_load_spread"].get<double>(),
          j["decode_instant_spread"].get<double>(), j["prefill_load_spread"].get<double>(),
          j["prefill_instant_spread"].get<double>());
    }
    std::printf(
        "Decode input demand (decode engines): in-flight input-token spread (time-mean CV, "
        "token-weighted CV, max/mean), decode step ms (timing model: every step; busiest "
        "rank per sample)\n");
    for (const PolicySummary& s : report.results) {
      const nlohmann::json& j = s.extra["pd"]["decode_demand"];
      std::printf(
          "  %-34s spread %.3f tw %.3f max/mean %.3f  step mean %6.2f p99 %6.2f  busiest mean "
          "%6.2f p99 %6.2f ms  agrees %llu/%llu\n",
          s.policy.c_str(), j["decode_input_spread"].get<double>(),
          j["decode_input_spread_token_weighted"].get<double>(),
          j["decode_input_max_over_mean"].get<double>(), j["decode_step_ms"]["mean"].get<double>(),
          j["decode_step_ms"]["p99"].get<double>(), j["busiest_rank_step_ms"]["mean"].get<double>(),
          j["busiest_rank_step_ms"]["p99"].get<double>(), j["agreements"].get<unsigned long long>(),
          j["decisions"].get<unsigned long long>());
    }
  }
  return code;
}

}  // namespace infera::bench
