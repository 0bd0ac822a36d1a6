// QueueMetrics: the admission queue's series (doc/admission.md "Router wiring", item 8;
// doc/operations.md "Metrics"), rendered when --admission-queue is on.
//
//   infera_router_queue_depth{pool}                 requests waiting, per pool (gauge)
//   infera_router_queue_wait_seconds                the wait of each released request
//   infera_router_queue_admitted_total{outcome}     bind_now | queued
//   infera_router_queue_rejected_total{reason}      full | timeout (429)
//   infera_router_queue_cancelled_total             clients gone while queued
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "router/metrics/metrics.h"

namespace infera::router {

class QueueMetrics {
 public:
  QueueMetrics();

  void CountAdmitted(bool queued) { (queued ? queued_ : bind_now_)->fetch_add(1); }
  void CountRejected(bool timeout) { (timeout ? timeout_ : full_)->fetch_add(1); }
  void CountCancelled() { cancelled_.Add(""); }
  void ObserveWait(double seconds) { wait_.Observe("", seconds); }
  // `depths`: (pool, waiting) of every pool the queue has seen.
  void Render(std::string& out, const std::vector<std::pair<std::string, size_t>>& depths) const;

 private:
  CounterFamily admitted_{"infera_router_queue_admitted_total",
                          "Requests offered to the admission queue, by outcome (bind_now: "
                          "bound at once, queued: held)."};
  CounterFamily rejected_{"infera_router_queue_rejected_total",
                          "Requests the admission queue answered 429, by reason (full: past "
                          "--queue-max, timeout: waited --queue-max-wait-s)."};
  CounterFamily cancelled_{"infera_router_queue_cancelled_total",
                           "Requests whose client went away while they waited in the "
                           "admission queue."};
  HistogramFamily wait_{"infera_router_queue_wait_seconds",
                        "Time released requests waited in the admission queue.",
                        {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  std::atomic<uint64_t>* bind_now_ = nullptr;
  std::atomic<uint64_t>* queued_ = nullptr;
  std::atomic<uint64_t>* full_ = nullptr;
  std::atomic<uint64_t>* timeout_ = nullptr;
};

}  // namespace infera::router
