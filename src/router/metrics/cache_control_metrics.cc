// CacheControlMetrics' exposition (apart from the request-side parsing in
// cache_control.cc, which the request fuzzer links without the metrics code).
#include "router/request/cache_control.h"
#include "router/metrics/metrics.h"

namespace infera::router {

void CacheControlMetrics::Render(std::string& out) const {
  RenderHeader(out, "infera_cache_control_seen_total", "counter",
               "kv-aware picks by the retention the request's cache-control hints ask for "
               "(Anthropic cache_control, OpenAI prompt_cache_retention / prompt_cache_key).");
  for (Retention r : {Retention::kNone, Retention::kShort, Retention::kLong}) {
    out += "infera_cache_control_seen_total{retention=\"";
    out += RetentionName(r);
    out += "\"} " + std::to_string(seen_[static_cast<size_t>(r)].load(std::memory_order_relaxed)) +
           "\n";
  }
  RenderHeader(out, "infera_cache_locality_skipped_total", "counter",
               "kv-aware picks made without the text cache term, by reason (multimodal: the "
               "request carries images, text overlap is not trusted).");
  out += "infera_cache_locality_skipped_total{reason=\"multimodal\"} " +
         std::to_string(skipped_multimodal_.load(std::memory_order_relaxed)) + "\n";
}

}  // namespace infera::router
