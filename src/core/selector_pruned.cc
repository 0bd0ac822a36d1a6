// The pruned kv-aware pick (doc/selection.md "Pruned pick"): the same winner and
// runner-up cost as the full scan, scoring in full only the candidates that may be
// either.
//
// Every term of the load is >= 0 (pending prefill, remote prefill, KV pressure,
// decode load, sequence-slot wait; spec: active + recent blocks; the queue discount
// is >= 1) and so is the image term, so a candidate's cost is at least its miss term
// with the most credit it could get:
//   bound(i) = w × (request_blocks(i) − trust_max × (device + host_w × host
//              + disk_w × disk + inflight_w × (request_blocks(i) − hits)))
// computed in the cost's own operation order (floating-point rounding is monotone, so
// bound(i) <= cost(i) holds for the doubles too). No configuration needs a fallback:
// where the bound says nothing (no tokens, images: w = 0) every candidate is scored.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/selector.h"

namespace infera::core {
namespace {

// `x` is clearly above every cost in [lo, hi] whose magnitude is at most `mag`: each
// of them is Less than x (the scan's relative-epsilon compare), with a factor 2 of
// margin for the compare's own rounding. Monotone in x: a larger x is clearly above too.
bool ClearlyAbove(double x, double hi, double mag) {
  return x - hi > 2e-9 * std::max({1.0, mag, std::fabs(x)});
}

}  // namespace

size_t Selector::PickPruned(const RoutingInput& input, std::span<const TargetId> candidates,
                            const KvAwareTerms& k, size_t start, PickResult& result,
                            Scored& best) {
  const size_t n = candidates.size();
  const double trust_max = std::max(1.0, predictions_.options().drifting_trust);
  // The bounds, by position (in result.costs: a skipped candidate keeps its bound);
  // the least of them and where, and the least above it.
  const double inf = std::numeric_limits<double>::infinity();
  double lowest = inf, rest = inf;
  at_lowest_.clear();
  for (size_t i = 0; i < n; ++i) {
    double bound = 0;
    if (k.use_tokens) {
      const MatchCounts& m = matches_[i];
      const double inflight =
          k.inflight_on && request_blocks_[i] > m.total() ? request_blocks_[i] - m.total() : 0.0;
      const double credit_max =
          trust_max * (m.device_hits + config_.host_hit_weight * m.host_hits +
                       config_.disk_hit_weight * m.disk_hits + config_.inflight_credit * inflight);
      bound = k.w_overlap * (request_blocks_[i] - credit_max);
    }
    result.costs[i] = bound;
    if (bound < lowest) {
      rest = lowest;
      lowest = bound;
      at_lowest_.clear();
      at_lowest_.push_back(i);
    } else if (bound == lowest) {
      at_lowest_.push_back(i);
    } else if (bound < rest) {
      rest = bound;
    }
  }
  scored_at_.clear();
  scores_.clear();
  scored_.assign(n, 0);
  const auto score = [&](size_t i) { ScorePruned(input, candidates, k, i, result); };
  for (size_t i : at_lowest_) score(i);
  // Raise the threshold until each candidate left is clearly above the costs that take
  // part in the scan (the "kept" ones); past 6 rounds, score them all.
  for (int round = 1;; ++round) {
    // The kept costs: the scored ones in increasing order while the next one is not
    // clearly above those before it (every skipped cost, scored or not, is then clearly
    // above all kept ones: it never replaces a kept best, and the first kept one in
    // scan order replaces any skipped best; the scan over the kept ones alone ends
    // on the same winner).
    fold_.resize(scores_.size());
    for (size_t j = 0; j < fold_.size(); ++j) fold_[j] = j;
    std::sort(fold_.begin(), fold_.end(),
              [&](size_t a, size_t b) { return scores_[a].cost < scores_[b].cost; });
    const double lo = scores_[fold_.front()].cost;
    size_t kept = 1;
    while (kept < fold_.size() &&
           !ClearlyAbove(scores_[fold_[kept]].cost, scores_[fold_[kept - 1]].cost,
                         std::max(std::fabs(lo), std::fabs(scores_[fold_[kept - 1]].cost)))) {
      ++kept;
    }
    const double hi = scores_[fold_[kept - 1]].cost;
    const double mag = std::max(std::fabs(lo), std::fabs(hi));
    if (rest == inf || ClearlyAbove(rest, hi, mag)) {
      fold_.resize(kept);
      break;
    }
    // Some bound left is not clearly above: score those near the kept costs too.
    const double threshold = std::max(rest, hi + 4e-9 * std::max({1.0, mag, std::fabs(rest)}));
    rest = inf;
    for (size_t i = 0; i < n; ++i) {
      if (scored_[i]) continue;
      if (round >= 6 || result.costs[i] <= threshold) {
        score(i);
      } else {
        rest = std::min(rest, result.costs[i]);
      }
    }
  }
  // The kept ones in scan order (positions from `start` on, wrapping).
  const auto scan_order = [&](size_t j) { return (scored_at_[j] + n - start) % n; };
  std::sort(fold_.begin(), fold_.end(),
            [&](size_t a, size_t b) { return scan_order(a) < scan_order(b); });
  size_t won = fold_.front();  // the winner's index in scores_
  for (size_t j = 1; j < fold_.size(); ++j) {
    if (Replaces(scores_[fold_[j]], scores_[won])) won = fold_[j];
  }
  const size_t winner = scored_at_[won];
  best = scores_[won];
  if (n > 1) result.runner_up_cost = RunnerUp(input, candidates, k, won, rest, result);
  result.scored = scores_.size();
  return winner;
}

void Selector::ScorePruned(const RoutingInput& input, std::span<const TargetId> candidates,
                           const KvAwareTerms& k, size_t i, PickResult& result) {
  const TargetId t = candidates[i];
  scored_[i] = 1;
  scored_at_.push_back(i);
  scores_.push_back(ScoreOne(input, i, t, k, load_.TermsOf(t, request_blocks_[i], now_ns_)));
  result.costs[i] = scores_.back().cost;
}

double Selector::RunnerUp(const RoutingInput& input, std::span<const TargetId> candidates,
                          const KvAwareTerms& k, size_t won, double rest, PickResult& result) {
  // The best other cost scored so far; every unscored bound is >= rest.
  double runner_up = std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < scores_.size(); ++j) {
    if (j != won) runner_up = std::min(runner_up, scores_[j].cost);
  }
  const auto score = [&](size_t i) {
    ScorePruned(input, candidates, k, i, result);
    runner_up = std::min(runner_up, scores_.back().cost);
  };
  const size_t n = candidates.size();
  // First those at the least unscored bound, in position order, until one costs no
  // more than it (an idle candidate's cost is its bound): no other can cost less.
  for (size_t i = 0; i < n && runner_up > rest; ++i) {
    if (!scored_[i] && result.costs[i] == rest) score(i);
  }
  // Then any left whose bound is below the best other cost so far (it only falls, so a
  // candidate passed over stays at or above it): each skipped cost is >= its bound >=
  // the runner-up.
  for (size_t i = 0; i < n && runner_up > rest; ++i) {
    if (!scored_[i] && result.costs[i] < runner_up) score(i);
  }
  return runner_up;
}

}  // namespace infera::core
