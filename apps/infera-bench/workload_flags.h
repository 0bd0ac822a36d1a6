// Command-line selection of a benchmark workload, shared by `infera-bench offline`
// and `infera-bench online` (doc/sim.md, "infera-bench").
//
// Thread-safety: plain functions.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/workload.h"

namespace infera::bench {

struct WorkloadFlags {
  std::string trace;               // Mooncake JSONL file (selects the trace workload)
  std::string workload = "trace";  // trace | shared-prefix | multi-turn | synthetic
  sim::MooncakeOptions mooncake;
  sim::SharedPrefixOptions shared;
  sim::MultiTurnOptions multi_turn;
  sim::SyntheticOptions synthetic;  // its lengths, rate and seed: the shared flags
  size_t images_per_request = 0;
  size_t distinct_images = 16;
};

void AddWorkloadFlags(CLI::App& app, WorkloadFlags& flags);
absl::StatusOr<sim::Workload> BuildWorkload(const WorkloadFlags& flags);

// One entry of --policies: "kv-aware", "kv-aware:4" (overlap weight 4),
// "kv-aware:20/2" (PD: prefill overlap weight 20, decode overlap weight 2; a mixed
// fleet uses the first), "round-robin", "random", "least-load", and the peers
// "dynamo", "lmetric", "llm-d", "sglang" (doc/peers.md; no weight), and "ttft-oracle"
// (offline, mixed fleets: sim::OfflineConfig::ttft_oracle, a bound, not a policy a
// router could run; doc/sim.md).
inline constexpr char kTtftOracle[] = "ttft-oracle";
struct PolicySpec {
  std::string name;
  double overlap_weight = 1.0;
  std::optional<double> decode_overlap_weight;  // set by "w/d": then w is the prefill weight
};
absl::StatusOr<std::vector<PolicySpec>> ParsePolicySpecs(const std::string& list);

}  // namespace infera::bench
