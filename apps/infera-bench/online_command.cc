#include "online_command.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "bench_report.h"
#include "http/client.h"
#include "http/io_pool.h"
#include "http/url.h"
#include "progress_bar.h"
#include "sim/prefix_cache_bound.h"

namespace infera::bench {
namespace {

namespace asio = http::asio;
using Clock = std::chrono::steady_clock;

struct RouterSpec {
  std::string label;
  http::Endpoint endpoint;
};

// One replay against one router; all coroutines run on one loop thread.
class Replay {
 public:
  Replay(const sim::Workload& workload, const OnlineFlags& flags, http::Endpoint endpoint,
         ProgressBar& bar)
      : workload_(workload), flags_(flags), endpoint_(std::move(endpoint)), bar_(bar) {}

  std::vector<RequestRecord> Run(http::IoPool& pool) {
    records_.assign(workload_.requests.size(), {});
    remaining_ = workload_.requests.size();
    client_ = std::make_unique<http::Client>(pool.executor(0));
    start_ = Clock::now() + std::chrono::milliseconds(100);
    std::future<void> done = done_.get_future();
    for (size_t i = 0; i < workload_.requests.size(); ++i) {
      asio::co_spawn(pool.executor(0), Counted(i), asio::detached);
    }
    done.wait();
    // Every request coroutine has finished (its frame is gone) when `done` is set; the
    // client dies on its loop, and this waits for that, so nothing posted to the loop
    // refers to this Replay after Run() returns.
    std::promise<void> reset;
    asio::post(pool.executor(0), [this, &reset] {
      client_.reset();
      reset.set_value();
    });
    reset.get_future().wait();
    return std::move(records_);
  }

  const std::vector<std::string>& workers() const { return worker_names_; }

 private:
  int64_t Ns(Clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - start_).count();
  }

  std::string Body(const sim::WorkloadRequest& w) const {
    std::vector<core::TokenId> tokens;
    workload_.Materialize(w, tokens);
    nlohmann::json body = {
        {"model", flags_.model}, {"prompt", tokens}, {"max_tokens", w.output_tokens},
        {"ignore_eos", true},    {"stream", true},   {"stream_options", {{"include_usage", true}}}};
    return body.dump();
  }

  // One(i), then the count: the last finished request sets `done_` only after its
  // coroutine (and the ClientStream it held) was destroyed.
  asio::awaitable<void> Counted(size_t i) {
    co_await One(i);
    if (--remaining_ == 0) done_.set_value();
  }

  asio::awaitable<void> One(size_t i) {
    const sim::WorkloadRequest& w = workload_.requests[i];
    RequestRecord& rec = records_[i];
    rec.prompt_tokens = w.prompt_tokens;
    const std::string body = Body(w);
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_at(start_ + std::chrono::nanoseconds(w.arrival_ns));
    co_await timer.async_wait(asio::use_awaitable);
    const Clock::time_point sent = Clock::now();
    rec.arrival_ns = Ns(sent);
    const auto deadline =
        sent + std::chrono::milliseconds(static_cast<int64_t>(flags_.timeout_s * 1000));
    http::Headers headers;
    headers.Add("Content-Type", "application/json");
    auto stream =
        co_await client_->Send(endpoint_, "POST", "/v1/completions", headers, body, deadline);
    if (!stream.ok() || (*stream)->status() != 200) {
      rec.failed = true;
    } else {
      std::string worker((*stream)->headers().Get("X-Infera-Worker-Id"));
      if (worker.empty()) worker = std::string((*stream)->headers().Get("X-Infera-Worker"));
      if (!worker.empty()) rec.worker = WorkerIndex(worker);
      co_await ReadStream(**stream, rec);
    }
    bar_.Add(1);
  }

  asio::awaitable<void> ReadStream(http::ClientStream& stream, RequestRecord& rec) {
    std::string buffer;
    Clock::time_point last{};
    bool saw_done = false;
    while (true) {
      auto piece = co_await stream.Read();
      if (!piece.ok()) {
        rec.failed = true;
        co_return;
      }
      if (!piece->has_value()) break;
      buffer += **piece;
      const Clock::time_point now = Clock::now();
      size_t eol;
      while ((eol = buffer.find('\n')) != std::string::npos) {
        std::string line = buffer.substr(0, eol);
        buffer.erase(0, eol + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) != 0) continue;
        std::string data = line.substr(5);
        if (!data.empty() && data[0] == ' ') data.erase(0, 1);
        if (data == "[DONE]") {
          saw_done = true;
          continue;
        }
        nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
        if (j.is_discarded() || !j.is_object()) continue;
        if (j.contains("error")) {
          rec.failed = true;
          continue;
        }
        auto choices = j.find("choices");
        if (choices != j.end() && choices->is_array() && !choices->empty()) {
          const nlohmann::json& c = (*choices)[0];
          auto text = c.find("text");
          if (text != c.end() && text->is_string() && !text->get<std::string>().empty()) {
            if (rec.first_token_ns < 0) {
              rec.first_token_ns = Ns(now);
            } else {
              rec.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
            }
            last = now;
          }
        }
        auto usage = j.find("usage");
        if (usage != j.end() && usage->is_object()) {
          rec.output_tokens = usage->value("completion_tokens", 0u);
          auto details = usage->find("prompt_tokens_details");
          if (details != usage->end() && details->is_object()) {
            rec.cached_tokens = details->value("cached_tokens", 0u);
          }
          if (usage->contains("prompt_tokens") && (*usage)["prompt_tokens"].is_number_unsigned()) {
            rec.prompt_tokens = (*usage)["prompt_tokens"].get<uint32_t>();
          }
        }
      }
    }
    if (!rec.failed && saw_done && rec.first_token_ns >= 0) rec.finish_ns = Ns(Clock::now());
    if (!saw_done) rec.failed = true;
  }

  int32_t WorkerIndex(const std::string& name) {
    auto [it, inserted] = worker_ids_.try_emplace(name, static_cast<int32_t>(worker_names_.size()));
    if (inserted) worker_names_.push_back(name);
    return it->second;
  }

  const sim::Workload& workload_;
  const OnlineFlags& flags_;
  http::Endpoint endpoint_;
  ProgressBar& bar_;
  std::unique_ptr<http::Client> client_;
  std::vector<RequestRecord> records_;
  size_t remaining_ = 0;
  std::promise<void> done_;
  Clock::time_point start_;
  std::map<std::string, int32_t> worker_ids_;
  std::vector<std::string> worker_names_;
};

bool ResetEngines(http::IoPool& pool, const std::vector<std::string>& urls) {
  bool ok = true;
  for (const std::string& url : urls) {
    absl::StatusOr<http::Endpoint> ep = http::ParseHttpUrl(url);
    if (!ep.ok()) {
      std::fprintf(stderr, "infera-bench: bad --reset-engine %s\n", url.c_str());
      return false;
    }
    std::promise<bool> result;
    asio::co_spawn(
        pool.executor(0),
        [&]() -> asio::awaitable<void> {
          http::Client client(co_await asio::this_coro::executor);
          // Requests of the previous replay may still be draining: retry briefly.
          for (int attempt = 0; attempt < 50; ++attempt) {
            auto r = co_await client.Fetch(*ep, "POST", "/reset_prefix_cache", {}, "",
                                           Clock::now() + std::chrono::seconds(5));
            if (r.ok() && r->status == 200) {
              result.set_value(true);
              co_return;
            }
            asio::steady_timer t(co_await asio::this_coro::executor,
                                 std::chrono::milliseconds(100));
            co_await t.async_wait(asio::use_awaitable);
          }
          result.set_value(false);
        },
        asio::detached);
    if (!result.get_future().get()) {
      std::fprintf(stderr, "infera-bench: could not reset %s\n", url.c_str());
      ok = false;
    }
  }
  return ok;
}

// Sum of a counter family's series in a Prometheus text page.
double SumSeries(const std::string& page, const std::string& name) {
  double sum = 0;
  size_t pos = 0;
  while ((pos = page.find(name, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || page[pos - 1] == '\n';
    pos += name.size();
    if (!line_start || pos >= page.size() || (page[pos] != '{' && page[pos] != ' ')) continue;
    const size_t value = page.find(' ', page[pos] == '{' ? page.find('}', pos) : pos);
    if (value != std::string::npos) sum += std::strtod(page.c_str() + value + 1, nullptr);
  }
  return sum;
}

// The prefill pool's prompt tokens looked up and hit so far: {queries, hits}; nullopt
// when an engine did not answer.
std::optional<std::pair<double, double>> PrefixCounters(http::IoPool& pool,
                                                        const std::vector<std::string>& urls) {
  std::pair<double, double> total{0, 0};
  for (const std::string& url : urls) {
    absl::StatusOr<http::Endpoint> ep = http::ParseHttpUrl(url);
    if (!ep.ok()) return std::nullopt;
    std::promise<std::optional<std::string>> page;
    asio::co_spawn(
        pool.executor(0),
        [&]() -> asio::awaitable<void> {
          http::Client client(co_await asio::this_coro::executor);
          auto r = co_await client.Fetch(*ep, "GET", "/metrics", {}, "",
                                         Clock::now() + std::chrono::seconds(10));
          page.set_value(r.ok() && r->status == 200 ? std::optional<std::string>(r->body)
                                                    : std::nullopt);
        },
        asio::detached);
    std::optional<std::string> text = page.get_future().get();
    if (!text) return std::nullopt;
    total.first += SumSeries(*text, "vllm:prefix_cache_queries_total");
    total.second += SumSeries(*text, "vllm:prefix_cache_hits_total");
  }
  return total;
}

// {"ttft_ms", "met", "goodput_rps", "served_mid_rps"}: requests completed with TTFT <=
// slo_ms, and their number per second of the workload's scheduled arrival span (not the
// send times: a starved client sends late, which must not shorten the span); the rate of
// first tokens over their middle half (MidFirstTokenRate: the fleet's capacity when the
// replay outruns it).
nlohmann::json OnlineGoodput(const std::vector<RequestRecord>& records,
                             const sim::Workload& workload, double slo_ms) {
  size_t met = 0;
  std::vector<int64_t> first_tokens;
  for (const RequestRecord& r : records) {
    if (r.failed || r.first_token_ns < 0) continue;
    first_tokens.push_back(r.first_token_ns);
    if (r.finish_ns >= 0 && static_cast<double>(r.first_token_ns - r.arrival_ns) / 1e6 <= slo_ms) {
      ++met;
    }
  }
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const sim::WorkloadRequest& w : workload.requests) {
    first = std::min(first, w.arrival_ns);
    last = std::max(last, w.arrival_ns);
  }
  const double span_s =
      workload.requests.empty() ? 0 : std::max(1.0, static_cast<double>(last - first) / 1e9);
  return {{"ttft_ms", slo_ms},
          {"met", met},
          {"goodput_rps", span_s > 0 ? static_cast<double>(met) / span_s : 0.0},
          {"served_mid_rps", MidFirstTokenRate(std::move(first_tokens))}};
}

}  // namespace

void AddOnlineFlags(CLI::App& app, OnlineFlags& f) {
  AddWorkloadFlags(app, f.workload);
  app.add_option("--router", f.routers, "router base URL, or label=URL (repeatable)")->required();
  app.add_option("--reset-engine", f.reset_engines,
                 "engine base URL to POST /reset_prefix_cache before each router's replay");
  app.add_option("--prefill-engine", f.prefill_engines,
                 "PD fleet: a prefill engine's base URL (repeatable); hit% becomes the prefill "
                 "pool's (its vllm:prefix_cache_hits_total / queries_total over the replay)");
  app.add_option("--model", f.model, "model name sent in requests");
  app.add_option("--engines", f.engines, "engines behind the router (for the pooled bound)");
  app.add_option("--num-gpu-blocks", f.num_gpu_blocks, "blocks per engine (pooled bound)");
  app.add_option("--block-size", f.block_size, "block size (bounds)")->check(CLI::Range(1, 4096));
  app.add_option("--timeout-s", f.timeout_s, "per-request timeout");
  app.add_option("--slo-ttft-ms", f.slo_ttft_ms,
                 "online goodput: completed requests with TTFT <= this per second of the "
                 "arrival span (JSON \"slo\" of each result)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--json", f.json_path, "write the JSON report here");
  app.add_option("--svg-dir", f.svg_dir, "write ttft_cdf.svg and load.svg here");
}

int RunOnline(const OnlineFlags& flags) {
  std::vector<RouterSpec> routers;
  for (const std::string& r : flags.routers) {
    const size_t eq = r.find('=');
    RouterSpec spec;
    spec.label = eq == std::string::npos ? "router" : r.substr(0, eq);
    absl::StatusOr<http::Endpoint> ep =
        http::ParseHttpUrl(eq == std::string::npos ? r : r.substr(eq + 1));
    if (!ep.ok()) {
      std::fprintf(stderr, "infera-bench: bad --router %s: %s\n", r.c_str(),
                   std::string(ep.status().message()).c_str());
      return 2;
    }
    spec.endpoint = *ep;
    routers.push_back(std::move(spec));
  }
  absl::StatusOr<sim::Workload> workload = BuildWorkload(flags.workload);
  if (!workload.ok()) {
    std::fprintf(stderr, "infera-bench: %s\n", std::string(workload.status().message()).c_str());
    return 2;
  }
  Report report;
  report.mode = "online";
  report.engines = flags.engines;
  report.num_gpu_blocks = flags.num_gpu_blocks;
  report.block_size = flags.block_size;
  report.requests = workload->requests.size();
  report.prompt_tokens = workload->TotalPromptTokens();
  sim::BoundRates bounds =
      sim::ComputeBounds(*workload, flags.block_size, flags.engines * flags.num_gpu_blocks);
  report.bound_hit_rate = bounds.pooled;
  report.infinite_hit_rate = bounds.infinite;

  http::IoPool pool(1);
  pool.Start();
  int rc = 0;
  for (const RouterSpec& router : routers) {
    if (!flags.reset_engines.empty() && !ResetEngines(pool, flags.reset_engines)) rc = 1;
    ProgressBar bar(router.label, workload->requests.size());
    std::optional<std::pair<double, double>> before;
    if (!flags.prefill_engines.empty()) before = PrefixCounters(pool, flags.prefill_engines);
    const auto start = Clock::now();
    Replay replay(*workload, flags, router.endpoint, bar);
    std::vector<RequestRecord> records = replay.Run(pool);
    bar.Finish();
    const size_t workers = std::max<size_t>(flags.engines, replay.workers().size());
    // The label names the policy ("kv-aware", "kv-aware:2", "round-robin", ...).
    std::string policy = router.label;
    double weight = 0;
    if (const size_t colon = policy.find(':'); colon != std::string::npos) {
      weight = std::strtod(policy.c_str() + colon + 1, nullptr);
      policy.resize(colon);
    } else if (policy == "kv-aware") {
      weight = 1.0;
    }
    PolicySummary s = SummarizeRun(policy, weight, records, workers, report.bound_hit_rate,
                                   report.infinite_hit_rate);
    s.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!flags.prefill_engines.empty()) {
      std::optional<std::pair<double, double>> after = PrefixCounters(pool, flags.prefill_engines);
      if (!before || !after || after->first <= before->first) {
        std::fprintf(stderr, "infera-bench: could not read the prefill engines' counters\n");
        rc = 1;
      } else {
        const double queries = after->first - before->first;
        const double hits = after->second - before->second;
        s.hit_rate = hits / queries;
        s.bound_share = report.bound_hit_rate > 0 ? s.hit_rate / report.bound_hit_rate : 0;
        s.infinite_share = report.infinite_hit_rate > 0 ? s.hit_rate / report.infinite_hit_rate : 0;
        s.extra["pd"] = {{"prefill_engines", flags.prefill_engines.size()},
                         {"prefill_prompt_tokens", queries},
                         {"prefill_cached_tokens", hits},
                         {"decode_hit_rate", static_cast<double>(s.cached_tokens) /
                                                 std::max<uint64_t>(1, s.prompt_tokens)}};
      }
    }
    if (flags.slo_ttft_ms > 0)
      s.extra["slo"] = OnlineGoodput(records, *workload, flags.slo_ttft_ms);
    LoadFromRecords(records, workers, 400, s);
    report.results.push_back(std::move(s));
  }
  pool.Stop();

  const int emit_rc = EmitReport(report, flags.json_path, flags.svg_dir);
  return emit_rc != 0 ? emit_rc : rc;
}

}  // namespace infera::bench
