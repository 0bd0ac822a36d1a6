#include "router/metrics/queue_metrics.h"

namespace infera::router {

QueueMetrics::QueueMetrics()
    : bind_now_(admitted_.Series(MetricLabel("outcome", "bind_now"))),
      queued_(admitted_.Series(MetricLabel("outcome", "queued"))),
      full_(rejected_.Series(MetricLabel("reason", "full"))),
      timeout_(rejected_.Series(MetricLabel("reason", "timeout"))) {
  cancelled_.Series("");
  wait_.Series("");
}

void QueueMetrics::Render(std::string& out,
                          const std::vector<std::pair<std::string, size_t>>& depths) const {
  RenderHeader(out, "infera_router_queue_depth", "gauge",
               "Requests waiting in the admission queue, by pool (<model>|mixed or "
               "<model>|prefill).");
  for (const auto& [pool, depth] : depths) {
    out += "infera_router_queue_depth{" + MetricLabel("pool", pool) + "} " + std::to_string(depth) +
           "\n";
  }
  wait_.Render(out);
  admitted_.Render(out);
  rejected_.Render(out);
  cancelled_.Render(out);
}

}  // namespace infera::router
