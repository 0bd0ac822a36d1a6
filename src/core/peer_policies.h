// The peers' routing policies, re-implemented from their own source and docs so the
// bench and the router can run them beside ours (doc/peers.md: what each scores, its
// defaults, the source file and commit, and what this re-implementation approximates).
//
//  * dynamo  (NVIDIA Dynamo's default KV router cost, lower wins):
//      cost = prefill_load_scale × max(0, pending_prefill + request_blocks − credit)
//           + active_blocks + new_active_blocks
//      credit = overlap_score_credit × device + 0.75 × host + 0.25 × disk hits;
//      decode picks (PD): cost = active_blocks + new_active_blocks (load only).
//  * lmetric (LMetric, arXiv 2603.15202, lower wins):
//      cost = (request_blocks − credit) × (requests + 1)
//  * llm-d   (llm-d's default scheduling profile, higher wins):
//      score = 3 × prefix + 2 × queue + 2 × kv
//      prefix = min-max normalised consecutive hits among the candidates that have
//               any (1 when they all have the same; 0 without hits);
//      queue  = (max_q − q) / (max_q − min_q), 1 when all equal (q: requests not past
//               their prefill); kv = 1 − active_blocks / capacity.
//  * sglang  (SGLang router cache_aware): imbalanced (max − min in-flight requests >
//      64 and max > 1.5 × min) → the least loaded; else the longest match in the
//      router's approximate tree of what it routed when match / request > 0.3, else the
//      target whose tree is smallest.
// Ties rotate (the scan starts at `tie_start`), as every policy of the selector.
//
// Pure functions over the signals the Selector gathers (PeerSignals); no state.
// Thread-safety: plain functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/kv_index.h"
#include "core/types.h"

namespace infera::core {

// One candidate's signals for one request.
struct PeerSignals {
  double request_blocks = 0;          // full blocks of the prompt (target's block size)
  MatchCounts hits;                   // consecutive hits in the events' view
  double pending_prefill_blocks = 0;  // LoadState::PendingPrefillBlocks (+ remote)
  size_t active_blocks = 0;           // LoadState::ActiveBlocks
  size_t new_active_blocks = 0;       // blocks of the request not active there yet
  size_t requests = 0;                // in flight (LoadState::Requests)
  size_t prefilling = 0;              // not past their prefill
  size_t capacity_blocks = 0;         // KV capacity, 0 unknown
  size_t approx_hits = 0;             // sglang: consecutive blocks in its tree
  size_t approx_blocks = 0;           // sglang: its tree's size for this target
};

struct DynamoConfig {
  double overlap_score_credit = 1.0;  // device hits
  double host_cache_hit_weight = 0.75;
  double disk_cache_hit_weight = 0.25;
  double prefill_load_scale = 1.0;
};
struct LlmdConfig {
  double prefix_weight = 3.0;  // prefix-cache scorer
  double queue_weight = 2.0;   // queue scorer
  double kv_weight = 2.0;      // kv-cache-utilization scorer
};
struct SglangConfig {
  double cache_threshold = 0.3;
  size_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
  // max_tree_size 2^26 characters of text; at ~4 characters a token, in 16-token
  // blocks (doc/peers.md).
  size_t max_tree_blocks = size_t{1} << 20;
};

// Dynamo's credited overlap in blocks.
double DynamoCredit(const PeerSignals& s, const DynamoConfig& c);
// Lower is better.
double DynamoCost(const PeerSignals& s, Role role, const DynamoConfig& c);
double LmetricCost(const PeerSignals& s, const DynamoConfig& credit);
// Higher is better; fills `out` (same size as `s`).
void LlmdScores(std::span<const PeerSignals> s, const LlmdConfig& c, std::span<double> out);
// The position SGLang's cache_aware picks. REQUIRES: !s.empty().
size_t SglangChoose(std::span<const PeerSignals> s, const SglangConfig& c, size_t tie_start);

}  // namespace infera::core
