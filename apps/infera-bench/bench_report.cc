#include "bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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
                            {"wall_s", s.wall_s}});
    if (!s.extra.is_null()) j["results"].back().update(s.extra);
  }
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
  std::snprintf(line, sizeof line, "%-18s %7s %7s %9s %9s %9s %9s %9s %9s %6s %5s\n", "policy",
                "hit%", "bound%", "ttft_mean", "ttft_p50", "ttft_p99", "e2e_mean", "e2e_p99",
                "out_tok/s", "spread", "fail");
  o << line;
  for (const PolicySummary& s : r.results) {
    std::snprintf(
        line, sizeof line, "%-18s %7.1f %7.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %6.3f %5zu\n",
        Label(s).c_str(), 100 * s.hit_rate, 100 * s.bound_share, s.ttft_ms.mean, s.ttft_ms.p50,
        s.ttft_ms.p99, s.e2e_ms.mean, s.e2e_ms.p99, s.output_tok_s, s.load_spread, s.failed);
    o << line;
  }
  o << "(latencies in ms; hit% = cached / prompt tokens; bound% = hit rate / pooled bound; "
       "spread = CV of prompt tokens per worker)\n";
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
