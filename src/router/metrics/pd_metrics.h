// PdMetrics: the prefill/decode dispatch series (doc/router.md "Metrics", issue 13).
//
//   infera_pd_dispatch_duration_seconds{leg,worker_id}  one leg: sent -> answer done
//   infera_pd_bootstrap_failures_total{reason}          a KV hand-off that failed
//   infera_pd_plans_total{kind}                          disaggregated | decode-only | mixed
// The picks per role are infera_router_picks_total{role,worker_id} (RouterMetrics).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <string>

#include "core/types.h"
#include "router/metrics/metrics.h"

namespace infera::router {

class PdMetrics {
 public:
  // leg: kPrefill or kDecode.
  void ObserveLeg(core::Role leg, const std::string& worker_id, double seconds);
  // reason: "prefill_unreachable", "prefill_status", "prefill_timeout",
  // "missing_kv_transfer_params", "decode_unreachable", "decode_status".
  void CountBootstrapFailure(const char* reason);
  // kind: core::PdPlanKindName.
  void CountPlan(const char* kind);
  void Render(std::string& out) const;

 private:
  HistogramFamily dispatch_duration_{
      "infera_pd_dispatch_duration_seconds",
      "Duration of one PD leg (sent to answer read), by leg and worker.",
      {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  CounterFamily bootstrap_failures_{"infera_pd_bootstrap_failures_total",
                                    "PD KV hand-offs that failed, by reason."};
  CounterFamily plans_{"infera_pd_plans_total",
                       "PD plans, by kind (disaggregated, decode-only: conditional "
                       "disaggregation, mixed: no complete pair)."};
};

}  // namespace infera::router
