// `infera-bench online`: replays a workload through running routers over HTTP with
// real timing (doc/sim.md, "Online mode").
//
// Each request is sent at its arrival time (scaled by --time-scale) as a streaming
// POST /v1/completions with the prompt as token ids, max_tokens = the workload's
// output length, ignore_eos, and stream_options.include_usage; the bench measures
// TTFT (first streamed text), ITL (gaps between streamed chunks), end-to-end
// latency, and reads usage.prompt_tokens_details.cached_tokens. The worker is read
// from the X-Infera-Worker response header when the router sends one.
//
// Several routers (`--router label=URL`, e.g. one per policy over the same
// engines) are replayed one after the other; before each, every `--reset-engine`
// URL gets POST /reset_prefix_cache so each policy starts from cold caches.
//
// Thread-safety: one run at a time; an internal IoPool does the I/O.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "workload_flags.h"

namespace infera::bench {

struct OnlineFlags {
  WorkloadFlags workload;
  std::vector<std::string> routers;        // "label=URL" or "URL"
  std::vector<std::string> reset_engines;  // engine base URLs
  // PD: the prefill engines; the hit rate is then the prefill pool's, from their
  // vllm:prefix_cache_{hits,queries}_total over the replay (as offline PD reports it).
  std::vector<std::string> prefill_engines;
  std::string model = "mock-model";
  size_t engines = 0;         // for the pooled bound (0: report the infinite bound only)
  size_t num_gpu_blocks = 0;  // per engine, for the pooled bound
  size_t block_size = 16;
  double timeout_s = 300;
  // Online goodput: requests that completed with TTFT <= this, per second of the
  // workload's scheduled arrival span; written as "slo": {"ttft_ms", "met",
  // "goodput_rps"} in each result (0: not computed). Not the offline goodput (a rate
  // search).
  double slo_ttft_ms = 0;
  std::string json_path;
  std::string svg_dir;
};

void AddOnlineFlags(CLI::App& app, OnlineFlags& flags);
int RunOnline(const OnlineFlags& flags);

}  // namespace infera::bench
