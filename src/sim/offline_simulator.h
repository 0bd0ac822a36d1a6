// OfflineSimulator: N simulated engines behind the router core, in virtual time
// (doc/sim.md).
//
// A discrete-event simulation. Three event sources, processed in time order (ties:
// KV-event deliveries, then engine step completions, then arrivals):
//  * arrival of a workload request: the router core (core::Selector over a
//    core::KvIndex — the same policy code as infera-router) picks an engine; the
//    pick's guard is told PrefillDone() at the request's first token (as the router
//    does at the first streamed token) and held until its last token; the
//    engine queues the request and, if idle, starts a step;
//  * engine step completion: the step's outputs become visible (first token →
//    TTFT, last token → completion), the KV events the step produced are handed to
//    the router after `event_delay_ns`, and the engine starts its next step if it
//    has work;
//  * KV-event delivery: the events are applied to the router's index exactly as
//    the event ingester does (BlockStored with parent and token ids, rehashed into
//    router hashes; BlockRemoved; AllBlocksCleared).
//
// Pure: no threads, no clock. Deterministic for a given workload and config.
//
// Thread-safety: Run() is self-contained; distinct simulations may run on
// distinct threads.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/admission_queue.h"
#include "core/approx_cache.h"
#include "core/decode_demand.h"
#include "core/pd_planner.h"
#include "core/selector.h"
#include "sim/engine.h"
#include "sim/kv_transfer.h"
#include "sim/workload.h"

namespace infera::sim {

struct OfflineConfig {
  size_t engines = 8;
  EngineConfig engine;
  core::PolicyConfig policy;
  int64_t event_delay_ns = 0;
  // Approximate mode (doc/approx-mode.md), as infera-router with
  // --kv-event-transport none: the engines' KV events are not delivered; each kv-aware
  // pick predicts its prompt cached on the picked engines. ttl_ns 0: exact mode.
  core::ApproxConfig approx{.ttl_ns = 0};
  // Experiment only: release a request's active blocks (its pick guard) at its first
  // token instead of its last. The router releases at the end of the response, so
  // false is the setting that matches it; true measures a prefill-only load term.
  bool release_load_at_first_token = false;
  // The router knows each engine's KV capacity (num_gpu_blocks in the worker
  // record); false: it learns it from the events.
  bool capacity_known = true;
  // Load samples (requests per engine) are taken this often; 0 = about 400 samples.
  int64_t sample_interval_ns = 0;
  // PD fleet (doc/pd.md): with both > 0 they replace `engines`; engines
  // [0, prefill_engines) are prefill workers, the rest decode workers, and every
  // arrival goes through core::PdPlanner (the router's PD pick logic).
  size_t prefill_engines = 0;
  size_t decode_engines = 0;
  core::PdConfig pd;
  KvTransferModel kv_transfer;
  // PD fleets: decode input demand (the router's --decode-input-demand and
  // --decode-request-weight, the same core::DecodeDemand and PdPlanner seam). A
  // request's reservation is booked at its decode pick and released at its last token.
  core::DemandMode decode_demand = core::DemandMode::kOff;
  double decode_request_weight = 0;
  // Admission queue with late binding (doc/admission.md): an arrival is held while
  // every engine's load (Selector::MinLoad; a PD fleet: every prefill engine's, the
  // router's pool for PD requests) is at least
  // `queue_threshold_blocks`, and bound when one drops below it (after each step and
  // each KV-event delivery). Tenant = the workload request's session; priority 0.
  // `queue_join_blocks` (0: off; the router's --queue-join-blocks): past it a cold
  // prompt that requests in flight would make half cached is held too, and a prompt
  // half cached somewhere binds at once (Selector::AdviseHold, doc/admission.md "Hold
  // rule").
  bool admission_queue = false;
  double queue_threshold_blocks = 1024;
  double queue_join_blocks = 0;
  core::QueueConfig queue;
  // The TTFT oracle (doc/sim.md "TTFT oracle"; mixed fleets only): each arrival goes
  // to the engine where a copy of that engine, given the request now, produces its
  // first token soonest (ties: the first from a rotating start). No router could know
  // this; it bounds what a greedy placement with perfect knowledge of every engine's
  // queue, step phase and cache reaches. The selector still books the request (its
  // guard, on the oracle's engine alone); `policy` should be round-robin.
  bool ttft_oracle = false;

  bool pd_fleet() const { return prefill_engines > 0 && decode_engines > 0; }
  size_t total_engines() const { return pd_fleet() ? prefill_engines + decode_engines : engines; }
};

struct RequestOutcome {
  int64_t arrival_ns = 0;
  int64_t first_token_ns = -1;
  int64_t finish_ns = -1;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // what the engine served from its prefix cache
  uint32_t output_tokens = 0;  // produced
  uint32_t router_hits = 0;    // blocks the router believed the picked engine held
  uint32_t engine = 0;
  bool rejected = false;  // the engine refused it (prompt larger than its cache)
  // PD fleets: `engine` is the decode engine and `cached_tokens` the prefill engine's
  // (or the decode engine's own when it served the whole request).
  int32_t prefill_engine = -1;        // -1: no prefill leg (mixed fleet, or decode-only)
  bool decode_only = false;           // conditional disaggregation kept it on the decode engine
  int64_t prefill_done_ns = -1;       // the prefill leg's answer
  int64_t transfer_ns = 0;            // KV transfer time charged before the decode leg
  uint32_t decode_cached_tokens = 0;  // the decode engine's own prefix hit
  // Admission queue: shed = rejected by the router (its 429: queue full or waited too
  // long), never sent to an engine; queue_ns = time held before it was bound.
  bool shed = false;
  int64_t queue_ns = 0;
};

struct OfflineResult {
  std::vector<RequestOutcome> requests;  // workload order
  // load_samples[k][e]: requests queued or running on engine e at sample_times_ns[k];
  // kv_samples[k][e]: its KV blocks in use / num_gpu_blocks then.
  std::vector<int64_t> sample_times_ns;
  std::vector<std::vector<uint32_t>> load_samples;
  std::vector<std::vector<float>> kv_samples;
  std::vector<EngineStats> engine_stats;
  // PD fleets, at sample_times_ns[k]: input tokens of the requests booked on each decode
  // engine (decode pick to last token), whatever the demand mode.
  std::vector<std::vector<uint64_t>> decode_input_samples;
  // PD fleets: the duration of every decode-engine step (the timing model's).
  std::vector<int64_t> decode_step_ns;
  // Decode input demand shadow|on: decode picks, and those whose suggestion matched
  // the original policy's choice.
  uint64_t demand_decisions = 0;
  uint64_t demand_agreements = 0;
  core::QueueStats queue;  // admission queue (zeros when off)
  // At the end of the run: blocks each engine caches, and blocks the router's index
  // holds for it (equal when every event was delivered and applied).
  std::vector<size_t> engine_block_counts;
  std::vector<size_t> router_block_counts;
  uint64_t kv_events_applied = 0;
  uint64_t kv_event_unknown_parent = 0;
  int64_t end_ns = 0;
};

// Called every few hundred arrivals with (arrivals so far, total).
using ProgressFn = std::function<void(size_t, size_t)>;

// REQUIRES: config.total_engines() > 0, config.policy.Validate().ok().
OfflineResult RunOffline(const Workload& workload, const OfflineConfig& config,
                         const ProgressFn& progress = nullptr);

}  // namespace infera::sim
