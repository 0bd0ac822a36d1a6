// Readiness: whether the router can route (/ready), apart from whether it lives
// (/health); doc/router.md "Health and readiness".
//
// Ready = the start-up replay is done and at least one worker is routable
// (FleetWorker::Routable: known, passing its health checks, breaker admitting).
// "Start-up replay done" latches: it holds from the first moment the KV-event source
// rebuilds no view (KvEventSource::Replaying() false) while some worker is routable;
// with ready_after_replay false (--ready-after-replay false) it holds from the start.
// Once latched only the routable count matters, so a worker joining (its replay is its
// own business: it is routable as a cold worker meanwhile) or leaving never flips
// readiness while another worker is routable.
//
// The latch is evaluated by every Check() (each /ready, /health and /metrics) and by
// a timer every kTickMs on the router's first loop until it holds, so a join shortly
// after the first views are rebuilt does not hold readiness back by its own replay.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>

#include "core/clock.h"
#include "events/kv_event_source.h"
#include "http/asio.h"
#include "http/io_pool.h"

namespace infera::router {

class WorkerSet;

class Readiness {
 public:
  static constexpr int kTickMs = 50;

  // REQUIRES: every reference outlives the readiness.
  Readiness(bool after_replay, const events::KvEventSource& events, const WorkerSet& workers,
            const core::Clock& clock)
      : events_(events), workers_(workers), clock_(clock), replay_done_(!after_replay) {}
  Readiness(const Readiness&) = delete;
  Readiness& operator=(const Readiness&) = delete;

  struct State {
    bool ready = false;
    bool replay_done = false;     // the start-up latch
    size_t routable_workers = 0;  // FleetWorker::Routable now
    size_t workers = 0;           // known to discovery
  };
  // Evaluates the latch and answers.
  State Check() const;

  // Ticks on `pool`'s first loop until the latch holds.
  void Start(http::IoPool& pool);
  // Runs `hook` once, on the thread that latches (at Start when it holds from the
  // start). REQUIRES: before Start.
  void set_on_latched(std::function<void()> hook) { on_latched_ = std::move(hook); }

 private:
  http::Awaitable<void> Tick();
  void RunHookOnce() const;

  const events::KvEventSource& events_;
  const WorkerSet& workers_;
  const core::Clock& clock_;
  mutable std::atomic<bool> replay_done_;
  std::function<void()> on_latched_;
  mutable std::atomic<bool> hook_ran_{false};
};

}  // namespace infera::router
