#include "router/metrics/pd_metrics.h"


namespace infera::router {

void PdMetrics::ObserveLeg(core::Role leg, const std::string& worker_id, double seconds) {
  dispatch_duration_.Observe(
      MetricLabel("leg", core::RoleName(leg)) + "," + MetricLabel("worker_id", worker_id), seconds);
}

void PdMetrics::CountBootstrapFailure(const char* reason) {
  bootstrap_failures_.Add(MetricLabel("reason", reason));
}

void PdMetrics::CountPlan(const char* kind) { plans_.Add(MetricLabel("kind", kind)); }

void PdMetrics::Render(std::string& out) const {
  dispatch_duration_.Render(out);
  bootstrap_failures_.Render(out);
  plans_.Render(out);
}

}  // namespace infera::router
