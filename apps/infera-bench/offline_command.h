// `infera-bench offline`: replays a workload through N simulated engines and the
// router core in virtual time, once per policy, next to the pooled-LRU and
// infinite-cache bounds (doc/sim.md).
//
// Thread-safety: runs the policies on `jobs` threads, each with its own simulation.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "sim/engine.h"
#include "sim/kv_transfer.h"
#include "workload_flags.h"

namespace infera::bench {

struct OfflineFlags {
  WorkloadFlags workload;
  size_t engines = 8;
  sim::EngineConfig engine;
  std::string policies = "kv-aware,round-robin,random,least-load";
  double recent_decay = 0.97;
  std::string load_term = "work";
  std::string capacity = "known";  // known (num_gpu_blocks) | learned (from events)
  double kv_pressure_threshold = 0.8;
  double kv_pressure_slope = 1.0;
  bool load_queue_scaling = true;
  double decode_load_blocks = 0;
  double seq_wait_blocks = 256;
  bool timed_prefill = true;
  bool kv_pressure_yield = false;
  double prefill_rate = 3000;
  double timed_prefill_floor = 0.3;
  double inflight_credit = 0.5;
  uint32_t inflight_credit_holders = 8;
  uint32_t inflight_share_window = 32;
  double slo_ttft_ms = 0;  // > 0: search each policy's goodput
  size_t goodput_steps = 5;
  double event_delay_ms = 0;
  // > 0: the simulated router runs approximate mode (no KV events; doc/approx-mode.md).
  double approx_ttl_s = 0;
  size_t approx_max_blocks = 262144;
  std::string release_load_at = "finish";
  std::string json_path;
  std::string svg_dir;
  size_t jobs = 2;
  // PD fleet (doc/pd.md): both > 0 replace --engines.
  size_t prefill_engines = 0;
  size_t decode_engines = 0;
  uint64_t pd_min_uncached_tokens = 0;
  // PD: decode input-demand variants, each run against every policy: comma list of
  // off | shadow[:W] | on[:W] (W: the request-count weight).
  std::string decode_input_demand = "off";
  // Admission queue variants run against every kv-aware policy (peers: off only):
  // comma list of auto | off | on (doc/admission.md; auto = on, unlabelled).
  std::string admission_queue = "auto";
  double queue_threshold_blocks = 1024;
  double queue_join_blocks = 300;  // --queue-join-blocks (0: off)
  size_t queue_max = 1024;
  double queue_max_wait_s = 30;
  sim::KvTransferModel kv_transfer;
};

void AddOfflineFlags(CLI::App& app, OfflineFlags& flags);
// Returns the process exit code; prints the table on stdout.
int RunOffline(const OfflineFlags& flags);

}  // namespace infera::bench
