#include "core/peer_policies.h"

#include <algorithm>
#include <limits>

namespace infera::core {

double DynamoCredit(const PeerSignals& s, const DynamoConfig& c) {
  return c.overlap_score_credit * s.hits.device_hits + c.host_cache_hit_weight * s.hits.host_hits +
         c.disk_cache_hit_weight * s.hits.disk_hits;
}

double DynamoCost(const PeerSignals& s, Role role, const DynamoConfig& c) {
  const double decode = static_cast<double>(s.active_blocks + s.new_active_blocks);
  // Dynamo's decode router routes by load alone (no overlap credit, no prompt-side
  // prefill tracking): its cost is the decode blocks.
  if (role == Role::kDecode) return decode;
  const double raw_prefill = s.pending_prefill_blocks + s.request_blocks;
  return c.prefill_load_scale * std::max(0.0, raw_prefill - DynamoCredit(s, c)) + decode;
}

double LmetricCost(const PeerSignals& s, const DynamoConfig& credit) {
  const double new_prefill = std::max(0.0, s.request_blocks - DynamoCredit(s, credit));
  return new_prefill * static_cast<double>(s.requests + 1);
}

void LlmdScores(std::span<const PeerSignals> s, const LlmdConfig& c, std::span<double> out) {
  // Prefix: min-max over the candidates the index reports any hit for; the others 0.
  uint32_t lo = std::numeric_limits<uint32_t>::max(), hi = 0;
  size_t qlo = std::numeric_limits<size_t>::max(), qhi = 0;
  for (const PeerSignals& p : s) {
    if (p.hits.total() > 0) {
      lo = std::min(lo, p.hits.total());
      hi = std::max(hi, p.hits.total());
    }
    qlo = std::min(qlo, p.prefilling);
    qhi = std::max(qhi, p.prefilling);
  }
  for (size_t i = 0; i < s.size(); ++i) {
    const PeerSignals& p = s[i];
    double prefix = 0;
    if (p.hits.total() > 0) {
      prefix = hi == lo ? 1.0 : static_cast<double>(p.hits.total() - lo) / (hi - lo);
    }
    const double queue =
        qhi == qlo ? 1.0 : static_cast<double>(qhi - p.prefilling) / static_cast<double>(qhi - qlo);
    double kv = 1.0;
    if (p.capacity_blocks > 0) {
      kv = 1.0 - std::min(1.0, static_cast<double>(p.active_blocks) /
                                   static_cast<double>(p.capacity_blocks));
    }
    out[i] = c.prefix_weight * prefix + c.queue_weight * queue + c.kv_weight * kv;
  }
}

size_t SglangChoose(std::span<const PeerSignals> s, const SglangConfig& c, size_t tie_start) {
  const size_t n = s.size();
  size_t max_load = 0, min_load = std::numeric_limits<size_t>::max();
  for (const PeerSignals& p : s) {
    max_load = std::max(max_load, p.requests);
    min_load = std::min(min_load, p.requests);
  }
  // The first position in scan order minimising key(i).
  auto argmin = [&](auto key) {
    size_t best = tie_start % n;
    for (size_t k = 1; k < n; ++k) {
      const size_t i = (tie_start + k) % n;
      if (key(i) < key(best)) best = i;
    }
    return best;
  };
  const bool imbalanced =
      max_load - min_load > c.balance_abs_threshold &&
      static_cast<double>(max_load) > static_cast<double>(min_load) * c.balance_rel_threshold;
  if (imbalanced) return argmin([&](size_t i) { return s[i].requests; });
  const size_t longest = argmin([&](size_t i) { return -static_cast<double>(s[i].approx_hits); });
  const double rate =
      s[longest].request_blocks > 0 ? s[longest].approx_hits / s[longest].request_blocks : 0.0;
  if (rate > c.cache_threshold) return longest;
  return argmin([&](size_t i) { return s[i].approx_blocks; });
}

}  // namespace infera::core
