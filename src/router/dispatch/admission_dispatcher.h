// AdmissionDispatcher: the router's admission queue with late binding, in front of the
// Dispatcher (doc/admission.md "Router wiring", items 2-8).
//
// Each request, before its first plan: its pool (PickPlanner::AdmissionKey) and the
// advice of core::Selector::AdviseHold (PickPlanner::AdviseHold): kBypass (its prompt is
// half cached on a candidate, with --queue-join-blocks on) dispatches at once, past
// any waiting request; otherwise AdmissionGate::Offer with must_wait = kWait (the
// pool's least pending prefill >= --queue-threshold-blocks, or >= --queue-join-blocks
// for a cold prompt that requests in flight would make half cached).
//   kBindNow: the dispatcher plans it as it would without a queue;
//   kRejected: 429 queue_full with Retry-After, in the API's shape;
//   kQueued: the request's coroutine waits for a one-shot signal (a steady timer on its
//     own loop, cancelled by a post to that loop) with its remaining timeout; then
//     bind: the dispatcher plans it with the load of now; expired (waited
//     --queue-max-wait-s): 429 queue_timeout; the client went away: Cancel, 499
//     (nothing else is held for a waiting request); the request timeout: 504.
// Drain (a pool's waiting requests are released while its least load is under the
// lower of the two thresholds, Selector::ReleaseBelow): after every guard's PrefillDone
// and Release (PickPlanner's on_load_lowered), after a bound request's first plan,
// and on a 10 ms timer that also runs Expire (KV events settle the views at the next
// MinLoad, so the timer covers them). Binding is serial: a pool releases its next request only after the one before
// has been planned (its load booked), so a burst is spread by fresh load.
//
// Lock order: mu_, then the gate's mutex, then the pick mutex; never called with the
// pick mutex held. Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/admission_queue.h"
#include "core/clock.h"
#include "http/io_pool.h"
#include "http/server.h"
#include "router/dispatch/dispatcher.h"
#include "router/metrics/queue_metrics.h"
#include "router/plan/admission_gate.h"
#include "router/plan/pick_planner.h"
#include "router/plan/worker_set.h"

namespace infera::router {

// --admission-queue, --queue-threshold-blocks, --queue-max, --queue-max-wait-s.
struct AdmissionOptions {
  bool enabled = false;
  // Held while the least loaded candidate has this many blocks of prefill pending (the
  // simulator's default, OfflineConfig::queue_threshold_blocks).
  double threshold_blocks = 1024;
  // --queue-join-blocks (0: off): the join hold's threshold (core::Selector::AdviseHold).
  double join_blocks = 300;
  // A PD fleet's prefill pool is queued too (--admission-queue on; auto queues the
  // mixed pools only: the simulator measured those).
  bool pd_pools = true;
  core::QueueConfig queue;
};

class AdmissionDispatcher {
 public:
  // REQUIRES: every reference outlives the dispatcher; options.enabled.
  AdmissionDispatcher(AdmissionOptions options, const WorkerSet& workers, PickPlanner& planner,
                      Dispatcher& inner, const core::Clock& clock);

  // Admits ctx (the headers give its priority and tenant), then dispatches it through
  // the inner dispatcher, or answers it (400, 429, 499, 504).
  http::Awaitable<void> Dispatch(RequestContext& ctx, const http::Headers& headers,
                                 http::ResponseWriter& w);
  // Releases what the pools' loads allow now. Never with the pick mutex held.
  void DrainAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the 10 ms drain-and-expire timer on one of `pool`'s loops; it runs until the
  // pool stops. REQUIRES: the pool stops before the dispatcher is destroyed.
  void Start(http::IoPool& pool);

  // The infera_router_queue_* series.
  void RenderMetrics(std::string& out) const;

  struct Waiter;

 private:
  enum class Verdict : uint8_t { kWaiting, kBind, kExpired };
  // Releases what `key`'s load allows; posts "bind" to each released waiter.
  void Drain(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // The waiter of `id` leaves the map with `verdict`, woken on its loop.
  void Wake(uint64_t id, Verdict verdict) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A released request was planned (or ended unplanned): its pool may bind the next.
  void Planned(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the verdict of a queued request; kWaiting: it left the queue itself
  // (client gone or request timeout).
  http::Awaitable<Verdict> Wait(RequestContext& ctx, Waiter& waiter, uint64_t id,
                                const std::string& key);
  http::Awaitable<void> Reject(RequestContext& ctx, http::ResponseWriter& w, const std::string& key,
                               bool timeout);
  http::Awaitable<void> TimerLoop();

  const AdmissionOptions options_;
  const WorkerSet& workers_;
  PickPlanner& planner_;
  Dispatcher& inner_;
  const core::Clock& clock_;
  AdmissionGate gate_;
  QueueMetrics metrics_;

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> models_ ABSL_GUARDED_BY(mu_);  // pool -> model
  // Released requests not yet planned, per pool (serial binding).
  absl::flat_hash_map<std::string, int> binding_ ABSL_GUARDED_BY(mu_);
};

}  // namespace infera::router
