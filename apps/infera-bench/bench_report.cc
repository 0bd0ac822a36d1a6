#include "bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

namespace infera::bench {
namespace {

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

nlohmann::json LatencyJson(const Latency& l) {
  return {{"mean", l.mean}, {"p50", l.p50}, {"p99", l.p99}};
}

std::string Label(const PolicySummary& s) {
  if (s.policy != "kv-aware") return s.policy;
  char buf[64];
  std::snprintf(buf, sizeof buf, "kv-aware w=%g", s.overlap_weight);
  return buf;
}

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
const char* Color(size_t i) { return kColors[i % (sizeof kColors / sizeof kColors[0])]; }

}  // namespace

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Latency Summarize(const std::vector<double>& values) {
  Latency l;
  if (values.empty()) return l;
  l.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  l.p50 = Percentile(values, 0.5);
  l.p99 = Percentile(values, 0.99);
  return l;
}

double MidFirstTokenRate(std::vector<int64_t> t) {
  if (t.size() < 4) return 0;
  std::sort(t.begin(), t.end());
  const size_t a = t.size() / 4, b = 3 * t.size() / 4;
  const double span_s = static_cast<double>(t[b] - t[a]) / 1e9;
  return span_s > 0 ? static_cast<double>(b - a) / span_s : 0;
}

PolicySummary SummarizeRun(const std::string& policy, double overlap_weight,
                           const std::vector<RequestRecord>& records, size_t workers,
                           double bound_hit_rate, double infinite_hit_rate) {
  PolicySummary s;
  s.policy = policy;
  s.overlap_weight = overlap_weight;
  s.requests = records.size();
  s.requests_per_worker.assign(workers, 0);
  s.prompt_tokens_per_worker.assign(workers, 0);
  std::vector<double> e2e, itl;
  uint64_t output_tokens = 0;
  int64_t first_arrival = INT64_MAX, last_finish = INT64_MIN;
  for (const RequestRecord& r : records) {
    first_arrival = std::min(first_arrival, r.arrival_ns);
    if (r.worker >= 0 && static_cast<size_t>(r.worker) < workers) {
      ++s.requests_per_worker[r.worker];
      s.prompt_tokens_per_worker[r.worker] += r.prompt_tokens;
    }
    if (r.failed || r.finish_ns < 0) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.prompt_tokens += r.prompt_tokens;
    s.cached_tokens += std::min(r.cached_tokens, r.prompt_tokens);
    output_tokens += r.output_tokens;
    if (r.first_token_ns >= 0) s.ttft_samples_ms.push_back(Ms(r.first_token_ns - r.arrival_ns));
    e2e.push_back(Ms(r.finish_ns - r.arrival_ns));
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    last_finish = std::max(last_finish, r.finish_ns);
  }
  s.hit_rate = s.prompt_tokens == 0 ? 0 : static_cast<double>(s.cached_tokens) / s.prompt_tokens;
  s.bound_share = bound_hit_rate > 0 ? s.hit_rate / bound_hit_rate : 0;
  s.infinite_share = infinite_hit_rate > 0 ? s.hit_rate / infinite_hit_rate : 0;
  s.ttft_ms = Summarize(s.ttft_samples_ms);
  s.e2e_ms = Summarize(e2e);
  s.itl_ms = Summarize(itl);
  if (s.completed > 0 && last_finish > first_arrival) {
    s.output_tok_s = static_cast<double>(output_tokens) / ((last_finish - first_arrival) / 1e9);
  }
  if (workers > 0) {
    double mean = 0;
    for (uint64_t t : s.prompt_tokens_per_worker) mean += static_cast<double>(t);
    mean /= static_cast<double>(workers);
    double var = 0;
    for (uint64_t t : s.prompt_tokens_per_worker) var += std::pow(t - mean, 2);
    var /= static_cast<double>(workers);
    s.load_spread = mean > 0 ? std::sqrt(var) / mean : 0;
  }
  return s;
}

void LoadFromRecords(const std::vector<RequestRecord>& records, size_t workers, size_t samples,
                     PolicySummary& s) {
  s.load_times_s.clear();
  s.load_per_worker.clear();
  int64_t end = 0;
  for (const RequestRecord& r : records) end = std::max({end, r.arrival_ns, r.finish_ns});
  if (workers == 0 || samples == 0 || end <= 0) return;
  // +1 at arrival, -1 at finish (a failed request counts until the run's end).
  std::vector<std::pair<int64_t, int>> deltas;
  for (const RequestRecord& r : records) {
    if (r.worker < 0 || static_cast<size_t>(r.worker) >= workers) continue;
    deltas.push_back({r.arrival_ns, r.worker + 1});
    deltas.push_back({r.finish_ns >= 0 ? r.finish_ns : end, -(r.worker + 1)});
  }
  std::sort(deltas.begin(), deltas.end());
  std::vector<double> current(workers, 0);
  size_t next = 0;
  for (size_t k = 0; k < samples; ++k) {
    const int64_t t =
        end * static_cast<int64_t>(k) / static_cast<int64_t>(samples - 1 + (samples == 1));
    for (; next < deltas.size() && deltas[next].first <= t; ++next) {
      const int w = deltas[next].second;
      current[std::abs(w) - 1] += w > 0 ? 1 : -1;
    }
    s.load_times_s.push_back(t / 1e9);
    s.load_per_worker.push_back(current);
  }
}

void ComputeGapClosed(Report& report) {
  const PolicySummary* rr = nullptr;
  for (const PolicySummary& s : report.results) {
    if (s.policy == "round-robin") rr = &s;
  }
  if (rr == nullptr || !report.has_floor) return;
  auto share = [](double base, double floor, double v) {
    return base - floor > 1e-9 ? (base - v) / (base - floor) : 0.0;
  };
  const Latency& f = report.ttft_floor_ms;
  const Latency base = rr->ttft_ms;
  for (PolicySummary& s : report.results) {
    s.gap_closed.mean = share(base.mean, f.mean, s.ttft_ms.mean);
    s.gap_closed.p50 = share(base.p50, f.p50, s.ttft_ms.p50);
    s.gap_closed.p99 = share(base.p99, f.p99, s.ttft_ms.p99);
  }
}

void SummarizeKvUtil(PolicySummary& s) {
  s.kv_util_mean = s.kv_util_max = 0;
  if (s.kv_util_fleet.empty()) return;
  for (double v : s.kv_util_fleet) {
    s.kv_util_mean += v;
    s.kv_util_max = std::max(s.kv_util_max, v);
  }
  s.kv_util_mean /= static_cast<double>(s.kv_util_fleet.size());
}

nlohmann::json ReportJson(const Report& report) {
  nlohmann::json j;
  j["mode"] = report.mode;
  j["engines"] = report.engines;
  j["num_gpu_blocks"] = report.num_gpu_blocks;
  j["block_size"] = report.block_size;
  j["requests"] = report.requests;
  j["prompt_tokens"] = report.prompt_tokens;
  j["bound_hit_rate"] = report.bound_hit_rate;
  j["infinite_hit_rate"] = report.infinite_hit_rate;
  j["results"] = nlohmann::json::array();
  for (const PolicySummary& s : report.results) {
    j["results"].push_back({{"policy", s.policy},
                            {"overlap_weight", s.overlap_weight},
                            {"hit_rate", s.hit_rate},
                            {"bound_share", s.bound_share},
                            {"infinite_share", s.infinite_share},
                            {"ttft_ms", LatencyJson(s.ttft_ms)},
                            {"e2e_ms", LatencyJson(s.e2e_ms)},
                            {"itl_ms", LatencyJson(s.itl_ms)},
                            {"output_tok_s", s.output_tok_s},
                            {"load_spread", s.load_spread},
                            {"requests_per_worker", s.requests_per_worker},
                            {"completed", s.completed},
                            {"failed", s.failed},
                            {"wall_s", s.wall_s},
                            {"gap_closed", LatencyJson(s.gap_closed)},
                            {"preemptions", s.preemptions},
                            {"kv_util",
                             {{"mean", s.kv_util_mean},
                              {"max", s.kv_util_max},
                              {"times_s", s.load_times_s},
                              {"fleet", s.kv_util_fleet}}}});
    if (s.has_goodput) {
      j["results"].back()["goodput"] = {{"time_scale", s.goodput_time_scale},
                                        {"rps", s.goodput_rps},
                                        {"ttft_p99_ms", s.goodput_ttft_p99_ms}};
    }
    if (!s.extra.is_null()) j["results"].back().update(s.extra);
  }
  if (report.has_floor) j["ttft_floor_ms"] = LatencyJson(report.ttft_floor_ms);
  if (report.slo_ttft_ms > 0) j["slo_ttft_ms"] = report.slo_ttft_ms;
  return j;
}

std::string FormatTable(const Report& r) {
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: %zu requests, %llu prompt tokens, %zu engines x %zu blocks of %zu tokens\n"
                "bounds: pooled LRU %.1f%%, infinite %.1f%% of prompt tokens\n",
                r.mode.c_str(), r.requests, static_cast<unsigned long long>(r.prompt_tokens),
                r.engines, r.num_gpu_blocks, r.block_size, 100 * r.bound_hit_rate,
                100 * r.infinite_hit_rate);
  o << line;
  if (r.has_floor) {
    std::snprintf(line, sizeof line,
                  "TTFT floor (no queueing, pooled-bound hits): mean %.1f p50 %.1f p99 %.1f ms\n",
                  r.ttft_floor_ms.mean, r.ttft_floor_ms.p50, r.ttft_floor_ms.p99);
    o << line;
  }
  std::snprintf(
      line, sizeof line, "%-18s %7s %7s %9s %9s %9s %9s %9s %9s %6s %5s %6s %6s %7s %6s %6s %8s\n",
      "policy", "hit%", "bound%", "ttft_mean", "ttft_p50", "ttft_p99", "e2e_mean", "e2e_p99",
      "out_tok/s", "spread", "fail", "gap%", "gap50%", "preempt", "kv%", "kvmax%", "goodput");
  o << line;
  for (const PolicySummary& s : r.results) {
    char goodput[32] = "-";
    if (s.has_goodput) std::snprintf(goodput, sizeof goodput, "%.2f", s.goodput_rps);
    std::snprintf(line, sizeof line,
                  "%-18s %7.1f %7.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %6.3f %5zu %6.1f %6.1f "
                  "%7lld %6.1f %6.1f %8s\n",
                  Label(s).c_str(), 100 * s.hit_rate, 100 * s.bound_share, s.ttft_ms.mean,
                  s.ttft_ms.p50, s.ttft_ms.p99, s.e2e_ms.mean, s.e2e_ms.p99, s.output_tok_s,
                  s.load_spread, s.failed, 100 * s.gap_closed.mean, 100 * s.gap_closed.p50,
                  static_cast<long long>(s.preemptions), 100 * s.kv_util_mean, 100 * s.kv_util_max,
                  goodput);
    o << line;
  }
  o << "(latencies in ms; hit% = cached / prompt tokens; bound% = hit rate / pooled bound; "
       "spread = CV of prompt tokens per worker; gap% / gap50% = share of the round-robin-to-"
       "floor TTFT gap closed, mean / p50; preempt = engine preemptions (-1 unknown); kv% = "
       "mean / max fleet KV use; goodput = req/s at TTFT p99 <= SLO)\n";
  return o.str();
}

std::string TtftCdfSvg(const Report& r) {
  const double w = 720, h = 420, left = 70, right = 200, top = 30, bottom = 50;
  double lo = 1e18, hi = 0;
  for (const PolicySummary& s : r.results) {
    for (double v : s.ttft_samples_ms) {
      lo = std::min(lo, std::max(v, 0.1));
      hi = std::max(hi, v);
    }
  }
  if (hi <= 0) lo = 1, hi = 10;
  const double llo = std::floor(std::log10(lo)), lhi = std::ceil(std::log10(std::max(hi, lo * 10)));
  auto x = [&](double v) {
    return left + (std::log10(std::max(v, 0.1)) - llo) / (lhi - llo) * (w - left - right);
  };
  auto y = [&](double q) { return top + (1 - q) * (h - top - bottom); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n<text x='"
    << left << "' y='18'>TTFT distribution (CDF), " << r.mode << ", " << r.engines
    << " engines</text>\n";
  for (double d = llo; d <= lhi; ++d) {
    const double px = x(std::pow(10, d));
    o << "<line x1='" << px << "' y1='" << top << "' x2='" << px << "' y2='" << h - bottom
      << "' stroke='#ddd'/><text x='" << px - 10 << "' y='" << h - bottom + 16 << "'>"
      << std::pow(10, d) << "</text>\n";
  }
  for (int q = 0; q <= 4; ++q) {
    o << "<line x1='" << left << "' y1='" << y(q / 4.0) << "' x2='" << w - right << "' y2='"
      << y(q / 4.0) << "' stroke='#ddd'/><text x='" << left - 35 << "' y='" << y(q / 4.0) + 4
      << "'>" << q * 25 << "%</text>\n";
  }
  o << "<text x='" << (left + w - right) / 2 - 30 << "' y='" << h - 10 << "'>TTFT (ms)</text>\n";
  for (size_t i = 0; i < r.results.size(); ++i) {
    std::vector<double> v = r.results[i].ttft_samples_ms;
    std::sort(v.begin(), v.end());
    o << "<polyline fill='none' stroke='" << Color(i) << "' stroke-width='1.5' points='";
    const size_t step = std::max<size_t>(1, v.size() / 400);
    for (size_t k = 0; k < v.size(); k += step) {
      o << x(v[k]) << "," << y(static_cast<double>(k + 1) / v.size()) << " ";
    }
    if (!v.empty()) o << x(v.back()) << "," << y(1.0);
    o << "'/>\n<text x='" << w - right + 10 << "' y='" << top + 16 * (i + 1) << "' fill='"
      << Color(i) << "'>" << Label(r.results[i]) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string LoadSvg(const Report& r) {
  const double pw = 720, ph = 180, left = 60, top = 30;
  const double h = top + ph * static_cast<double>(std::max<size_t>(1, r.results.size())) + 20;
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << pw + 40 << "' height='" << h
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n<text x='"
    << left << "' y='18'>Requests queued or running per worker over time (" << r.mode
    << ")</text>\n";
  for (size_t i = 0; i < r.results.size(); ++i) {
    const PolicySummary& s = r.results[i];
    const double y0 = top + ph * static_cast<double>(i);
    const double inner = ph - 40;
    double tmax = s.load_times_s.empty() ? 1 : std::max(1e-9, s.load_times_s.back());
    double vmax = 1;
    for (const auto& row : s.load_per_worker) {
      for (double v : row) vmax = std::max(vmax, v);
    }
    o << "<text x='" << left << "' y='" << y0 + 14 << "'>" << Label(s) << " (max " << vmax
      << ", t=" << tmax << " s)</text>\n<rect x='" << left << "' y='" << y0 + 20 << "' width='"
      << pw - left << "' height='" << inner << "' fill='none' stroke='#ccc'/>\n";
    const size_t workers = s.load_per_worker.empty() ? 0 : s.load_per_worker[0].size();
    for (size_t wk = 0; wk < workers; ++wk) {
      o << "<polyline fill='none' stroke-opacity='0.8' stroke='" << Color(wk) << "' points='";
      for (size_t k = 0; k < s.load_times_s.size() && k < s.load_per_worker.size(); ++k) {
        const double px = left + s.load_times_s[k] / tmax * (pw - left);
        const double py = y0 + 20 + inner * (1 - s.load_per_worker[k][wk] / vmax);
        o << px << "," << py << " ";
      }
      o << "'/>\n";
    }
  }
  o << "</svg>\n";
  return o.str();
}

namespace {

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int EmitReport(const Report& report, const std::string& json_path, const std::string& svg_dir) {
  std::fputs(FormatTable(report).c_str(), stdout);
  if (!json_path.empty() && !WriteFile(json_path, ReportJson(report).dump(2) + "\n")) {
    std::fprintf(stderr, "infera-bench: cannot write %s\n", json_path.c_str());
    return 1;
  }
  if (!svg_dir.empty() && (!WriteFile(svg_dir + "/ttft_cdf.svg", TtftCdfSvg(report)) ||
                           !WriteFile(svg_dir + "/load.svg", LoadSvg(report)))) {
    std::fprintf(stderr, "infera-bench: cannot write SVGs into %s\n", svg_dir.c_str());
    return 1;
  }
  return 0;
}

}  // namespace infera::bench
