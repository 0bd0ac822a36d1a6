// FleetHistory: what the fleet view (GET /v1/admin/fleet, GET /dashboard) shows over
// time, bounded (doc/operations.md "Dashboard").
//
//   * the last kLastPicks route receipts (one per plan: a mixed pick, or both legs of
//     a PD plan), oldest first; the same record --route-receipt sends as the
//     X-Infera-Route header (FormatRouteReceipt, doc/router.md "Route receipt");
//   * per second, the last kSeconds seconds: picks (legs), cache-hit and request
//     blocks of the picked targets, requests started and ended, time to first byte
//     (sum, count, max) and the most requests in flight at once;
//   * per target, the last kTargetSeconds seconds: picks, cache-hit and request blocks
//     (its hit rate over the last minute, its picks per second). A target no pick
//     named for kTargetSeconds is dropped (the map holds only recently picked targets).
// Times come from the caller (the router's injected clock); the history reads none.
//
// Thread-safety: every method may be called from any thread (one mutex, held for a
// few array updates; never across I/O).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "core/selector.h"

namespace infera::router {

// One leg of a route receipt: where it went and why (core::PickResult's terms).
struct RouteLegReceipt {
  core::Role role = core::Role::kMixed;
  std::string target;  // FleetWorker::TargetName
  uint32_t cache_hits = 0;
  uint32_t request_blocks = 0;
  double w_overlap = 0;  // kv-aware: the overlap weight; else 0
  double credited = 0;   // kv-aware: credited hit blocks (trust x tier weights)
  double load = 0;       // kv-aware, least-load: the winner's load term
  double cost = 0;       // kv-aware: w_overlap x (request_blocks - credited) + load
                         // (+ image term); least-load: load; others 0
  // The best cost among the other candidates; nullopt when there was one candidate or
  // the policy scores none (round-robin, random, least-load).
  std::optional<double> runner_up_cost;
  uint32_t candidates = 0;  // candidates weighed (0: the policy keeps no cost)
};

// One plan's receipt: a mixed pick has one leg, a PD plan two (prefill first).
struct RouteReceipt {
  int64_t at_ns = 0;  // the router's clock at the pick
  std::string request_id;
  core::Policy policy = core::Policy::kKvAware;
  absl::InlinedVector<RouteLegReceipt, 2> legs;
};

// The leg of `pick` (its picked_name set).
RouteLegReceipt LegReceiptOf(const core::PickResult& pick);

// The X-Infera-Route header value (doc/router.md "Route receipt"): one element per
// leg, prefill first, joined by ", "; each element `key=value` pairs joined by ";":
//   role=<mixed|prefill|decode>;target=<name>;policy=<p>;cache_hits=<n>;
//   request_blocks=<n>;cost=<x>;w_overlap=<x>;credited=<x>;load=<x>;candidates=<n>
//   [;runner_up_cost=<x>]
// Numbers print with %.6g; the target is percent-encoded outside [A-Za-z0-9._:#@/+-].
std::string FormatRouteReceipt(const RouteReceipt& receipt);

class FleetHistory {
 public:
  static constexpr size_t kLastPicks = 64;
  static constexpr size_t kSeconds = 300;
  static constexpr size_t kTargetSeconds = 60;

  struct Second {
    int64_t second = 0;  // the router clock's second (now_ns / 1e9)
    uint64_t picks = 0;
    uint64_t hit_blocks = 0;
    uint64_t request_blocks = 0;
    uint64_t started = 0;
    uint64_t ended = 0;
    uint64_t ttft_count = 0;
    double ttft_sum_s = 0;
    double ttft_max_s = 0;
    int64_t max_inflight = 0;   // most requests in flight at once in the second
    int64_t last_inflight = 0;  // requests in flight at its last event
  };
  struct TargetWindow {
    uint64_t picks = 0;  // over the last kTargetSeconds
    uint64_t hit_blocks = 0;
    uint64_t request_blocks = 0;
    uint64_t picks_10s = 0;  // over the last 10 seconds
  };

  void RecordPick(RouteReceipt receipt) ABSL_LOCKS_EXCLUDED(mu_);
  void RequestStarted(int64_t now_ns) ABSL_LOCKS_EXCLUDED(mu_);
  // `ttft_s`: time to the answer's first byte to the client; nullopt: none was sent.
  void RequestEnded(int64_t now_ns, std::optional<double> ttft_s) ABSL_LOCKS_EXCLUDED(mu_);

  // The last kSeconds seconds up to now's, oldest first, seconds without activity
  // included (zeros, with the in-flight count carried).
  std::vector<Second> Seconds(int64_t now_ns) const ABSL_LOCKS_EXCLUDED(mu_);
  TargetWindow Target(const std::string& target, int64_t now_ns) const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<RouteReceipt> LastPicks() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t tracked_targets() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct TargetSecond {
    int64_t second = -1;
    uint64_t picks = 0, hit_blocks = 0, request_blocks = 0;
  };
  using TargetRing = std::array<TargetSecond, kTargetSeconds>;

  // The bucket of `second`, reset when it held an older second.
  Second& At(int64_t second) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops targets with no pick in the last kTargetSeconds (once per second).
  void Prune(int64_t second) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::array<RouteReceipt, kLastPicks> picks_ ABSL_GUARDED_BY(mu_);
  size_t picks_next_ ABSL_GUARDED_BY(mu_) = 0;
  size_t picks_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<Second, kSeconds> seconds_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, TargetRing> targets_ ABSL_GUARDED_BY(mu_);
  int64_t pruned_second_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace infera::router
