// AdmissionQueue: the router-side admission queue with late binding (doc/admission.md).
//
// When every candidate's predicted queueing is past a threshold (the caller measures
// it: Selector::MinLoad), a request is held here instead of being bound to a worker
// now; it is bound later, when a worker frees (the caller drains the queue while
// MinLoad is under the threshold), so a burst is spread by fresh load and a warm
// engine can take a repeat a moment later instead of a cold one taking it now.
//
// Order of release (PopNext): the highest priority first; within a priority the
// tenants take turns (round-robin over the tenants that have requests waiting, in the
// order they first queued); within a tenant, first come first served. A request that
// arrives while others wait queues too (no overtaking by arrival luck).
//
// Bounds: at most `max_queued` requests wait; one more is rejected (the router's 429
// with Retry-After). A request that waited `max_wait_ns` is dropped by Expire() (also
// a 429). Cancel() removes a waiting request (client gone): nothing else is held for
// it — binding, and with it every guard, happens only at release.
//
// Pure: the caller passes the time in (virtual time in the simulator, the router's
// injected clock). Thread-safety: none; the caller serialises (the router's pick
// mutex, the simulator's single thread).
//
// Example:
//   AdmissionQueue queue({.max_queued = 1024, .max_wait_ns = 30'000'000'000});
//   switch (queue.Offer(id, "tenant-a", /*priority=*/0, now, selector.MinLoad(c) >= t)) {
//     case Admission::kBindNow: pick now; break;
//     case Admission::kQueued: hold it; break;
//     case Admission::kRejected: 429 with Retry-After queue.RetryAfterSeconds(now);
//   }
//   ... a worker frees: while (!queue.empty() && selector.MinLoad(c) < t) bind(*queue.PopNext());
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace infera::core {

struct QueueConfig {
  size_t max_queued = 1024;              // waiting requests; one more is rejected
  int64_t max_wait_ns = 30'000'000'000;  // held longer: dropped by Expire (0: no limit)
};

enum class Admission : uint8_t { kBindNow, kQueued, kRejected };
// "bind-now", "queued", "rejected".
const char* AdmissionName(Admission a);

struct QueueStats {
  uint64_t bound_now = 0;      // Offer -> kBindNow
  uint64_t queued = 0;         // Offer -> kQueued
  uint64_t rejected_full = 0;  // Offer -> kRejected
  uint64_t released = 0;       // PopNext
  uint64_t expired = 0;        // Expire
  uint64_t cancelled = 0;      // Cancel of a waiting request
  int64_t total_wait_ns = 0;   // over released requests
  int64_t max_wait_ns = 0;
};

class AdmissionQueue {
 public:
  explicit AdmissionQueue(const QueueConfig& config = {});

  // A new request. `must_wait`: the caller's verdict that binding now would queue on
  // every candidate. kBindNow when nothing waits and !must_wait; else kQueued when
  // there is room, else kRejected. REQUIRES: `id` is not waiting already.
  Admission Offer(uint64_t id, std::string_view tenant, int priority, int64_t now_ns,
                  bool must_wait);
  // The next request to bind (see the order above), or nullopt when none waits.
  std::optional<uint64_t> PopNext(int64_t now_ns);
  // Removes a waiting request; false if it is not waiting (bound, expired, unknown).
  bool Cancel(uint64_t id);
  // Drops the requests that have waited max_wait_ns or more; returns their ids, oldest
  // first.
  std::vector<uint64_t> Expire(int64_t now_ns);

  // Seconds a rejected client should wait before retrying: how long the oldest
  // waiting request has waited, rounded up, at least 1.
  int64_t RetryAfterSeconds(int64_t now_ns) const;
  // The oldest waiting request's arrival, if any.
  std::optional<int64_t> OldestArrival() const;

  size_t size() const { return waiting_.size(); }
  bool empty() const { return waiting_.empty(); }
  size_t TenantsWaiting() const;
  const QueueStats& stats() const { return stats_; }
  const QueueConfig& config() const { return config_; }

 private:
  struct Entry {
    std::string tenant;
    int priority = 0;
    int64_t arrival_ns = 0;
  };
  // One priority level: tenants in turn order, each with its FIFO.
  struct Level {
    std::deque<std::string> turn;  // tenants with requests waiting, next first
    absl::flat_hash_map<std::string, std::deque<uint64_t>> fifo;
  };
  void Remove(uint64_t id, const Entry& e);

  QueueConfig config_;
  absl::flat_hash_map<uint64_t, Entry> waiting_;
  std::map<int, Level, std::greater<>> levels_;  // highest priority first
  std::deque<uint64_t> by_arrival_;              // for Expire (stale ids skipped)
  QueueStats stats_;
};

}  // namespace infera::core
