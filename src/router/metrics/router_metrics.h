// RouterMetrics: the request-path series of the router (doc/router.md "Metrics").
//
// The series every request touches are looked up once, at construction, so the hot
// path records into atomics without a map lookup or a mutex. Fleet gauges (workers,
// active blocks, breakers, cache views) are rendered by AdminViews from the fleet.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/decode_demand.h"
#include "core/selector.h"
#include "router/request/api_request.h"
#include "router/request/cache_control.h"
#include "router/admin/fleet_history.h"
#include "router/metrics/metrics.h"
#include "router/metrics/pd_metrics.h"
#include "router/request/request_context.h"
#include "router/metrics/session_metrics.h"

namespace infera::router {

// `role="mixed"` etc.
const std::string& RoleLabel(core::Role role);

class RouterMetrics {
 public:
  explicit RouterMetrics(core::Policy policy);
  RouterMetrics(const RouterMetrics&) = delete;
  RouterMetrics& operator=(const RouterMetrics&) = delete;

  void RequestStarted() { inflight_.fetch_add(1, std::memory_order_relaxed); }
  // One answered request: infera_router_requests_total, the duration histogram and
  // the in-flight gauge.
  void RequestEnded(ApiKind kind, int status, Outcome outcome, double seconds);

  // The routing-overhead stages of a request's first pick (seconds).
  void ObserveStages(double parse_s, double tokenize_s, double hash_match_s, double total_s);
  void ObservePick(core::Role role, uint32_t cache_hits, uint32_t request_blocks);
  // The picks counter of one target (`role`, `worker_id` = TargetKey::ToString()).
  std::atomic<uint64_t>* PickCounter(core::Role role, const std::string& target_name);
  void CountFailover(const std::string& worker_id);
  // kind: "unreachable", "status_5xx", "timeout", "first_byte_timeout", "unhealthy".
  void CountUpstreamError(const std::string& worker_id, const char* kind);
  // The router's own descriptors or buffers ran out (kind: "emfile", "enfile",
  // "enobufs", "enomem"): never counted against a worker.
  void CountLocalError(std::string_view kind);
  // A prompt sized by the bytes/4 estimate instead of its tokens (reason:
  // "over_max_tokenize_bytes", "tokenizer_busy", "render_failed").
  void CountPromptEstimated(const char* reason);
  // infera_router_relay_cut_total{reason}: an answer the relay cut short for its size
  // (reason: "sse_event_too_large", "translated_body_too_large").
  void CountRelayCut(const char* reason) { relay_cut_total_.Add(MetricLabel("reason", reason)); }
  // infera_router_loops_detected_total: requests refused 508 because they already
  // passed through this router (X-Infera-Via).
  void CountLoopDetected() { loops_detected_total_.Add(""); }
  // infera_router_workers_refused_total{reason}: worker records discovery reported
  // that the router refused (reason: "self_address", "bad_url").
  void CountWorkerRefused(const char* reason) {
    workers_refused_total_.Add(MetricLabel("reason", reason));
  }
  // Prompts on the encoder's pool, running or waiting (+1 / -1).
  void TokenizeJobs(int delta) { tokenize_jobs_.fetch_add(delta, std::memory_order_relaxed); }

  // infera_router_decode_demand_decisions_total{mode,input,agrees}: one decode pick's
  // demand decision (mode shadow|on; input exact|estimated; the suggestion matched
  // the original policy's choice).
  void CountDemandDecision(core::DemandMode mode, bool estimated, bool agrees);
  // infera_router_render_parity_probes_total{outcome}: one render-parity probe
  // (outcome: exact, diverged, unsupported, error; doc/render-parity.md).
  void CountRenderParityProbe(const char* outcome) {
    render_parity_probes_total_.Add(MetricLabel("outcome", outcome));
  }

  // infera_router_health_checks_total{outcome}: one active health probe (outcome: ok,
  // status_5xx, timeout, unreachable, local) and
  // infera_router_health_transitions_total{to}: a worker's verdict flipped (to:
  // unhealthy, healthy); doc/router.md "Active health checks".
  void CountHealthCheck(const char* outcome) {
    health_checks_total_.Add(MetricLabel("outcome", outcome));
  }
  void CountHealthTransition(bool healthy) {
    health_transitions_total_.Add(MetricLabel("to", healthy ? "healthy" : "unhealthy"));
  }

  PdMetrics& pd() { return pd_; }
  SessionMetrics& sessions() { return sessions_; }
  CacheControlMetrics& cache_control() { return cache_control_; }
  // The fleet view's history: last picks, per-second series (GET /v1/admin/fleet).
  FleetHistory& history() { return history_; }
  const FleetHistory& history() const { return history_; }

  // The families above and infera_request_inflight, in exposition format.
  void Render(std::string& out) const;

 private:
  const std::string policy_label_;  // router="<policy>"
  std::atomic<int64_t> inflight_{0};
  PdMetrics pd_;
  SessionMetrics sessions_;
  CacheControlMetrics cache_control_;
  FleetHistory history_;
  std::atomic<int64_t> tokenize_jobs_{0};

  CounterFamily requests_total_{"infera_router_requests_total",
                                "Requests answered, by endpoint and HTTP status."};
  CounterFamily picks_total_{"infera_router_picks_total", "Picks, by role and worker."};
  CounterFamily failovers_total_{"infera_router_failovers_total",
                                 "Retries on another worker before the first byte."};
  CounterFamily upstream_errors_total_{"infera_router_upstream_errors_total",
                                       "Upstream failures, by worker and kind."};
  CounterFamily local_errors_total_{"infera_router_local_errors_total",
                                    "Requests failed because the router's own descriptors or "
                                    "buffers ran out, by kind."};
  CounterFamily prompts_estimated_total_{"infera_router_prompts_estimated_total",
                                         "Prompts sized by the bytes/4 estimate instead of "
                                         "tokenizing, by reason."};
  CounterFamily demand_decisions_total_{
      "infera_router_decode_demand_decisions_total",
      "Decode input-demand decisions, by mode, input count (exact or estimated) and whether "
      "the suggestion agreed with the original policy."};
  CounterFamily render_parity_probes_total_{
      "infera_router_render_parity_probes_total",
      "Render-parity probes of workers' /tokenize, by outcome (exact, diverged, unsupported, "
      "error)."};
  CounterFamily health_checks_total_{
      "infera_router_health_checks_total",
      "Active health probes of workers, by outcome (ok, status_5xx, timeout, unreachable, "
      "local)."};
  CounterFamily health_transitions_total_{
      "infera_router_health_transitions_total",
      "Workers whose health-check verdict flipped, by the new verdict (unhealthy, healthy)."};
  CounterFamily relay_cut_total_{"infera_router_relay_cut_total",
                                 "Answers the relay cut short for their size, by reason."};
  CounterFamily loops_detected_total_{
      "infera_router_loops_detected_total",
      "Requests refused with 508 because they had passed through this router already."};
  CounterFamily workers_refused_total_{"infera_router_workers_refused_total",
                                       "Worker records refused at discovery, by reason."};
  HistogramFamily pick_cache_hits_{"infera_router_pick_cache_hits",
                                   "Cache-hit blocks of the picked target.",
                                   {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}};
  HistogramFamily pick_request_blocks_{"infera_router_pick_request_blocks",
                                       "Prompt blocks of picked requests.",
                                       {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}};
  HistogramFamily request_duration_{
      "infera_request_duration_seconds",
      "Request duration, by router policy and outcome.",
      {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  HistogramFamily overhead_{
      "infera_router_routing_overhead_seconds",
      "Router time before proxying, by stage (parse, render_tokenize, "
      "hash_match, total).",
      {1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.1}};

  // Series looked up once.
  std::array<Histogram*, kOutcomeCount> duration_by_outcome_{};
  Histogram* stage_parse_ = nullptr;
  Histogram* stage_render_tokenize_ = nullptr;
  Histogram* stage_hash_match_ = nullptr;
  Histogram* stage_total_ = nullptr;
  std::array<Histogram*, 3> pick_cache_hits_by_role_{};
  std::array<Histogram*, 3> pick_request_blocks_by_role_{};
  // Infera's names of series counted here too (RenderInferaAliases).
  std::array<std::atomic<uint64_t>, kOutcomeCount> requests_by_outcome_{};
  std::array<std::atomic<uint64_t>, 3> prefix_blocks_hit_{}, prefix_blocks_{};
  void RenderInferaAliases(std::string& out) const;
  // [mode: shadow, on][input: exact, estimated][agrees: false, true]
  std::array<std::atomic<uint64_t>*, 8> demand_decisions_{};
};

}  // namespace infera::router
