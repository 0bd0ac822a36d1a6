// RenderParityProber: asks each worker's /tokenize whether it renders like the router
// (render_parity.h has the shapes and verdict rules; doc/render-parity.md).
//
// A worker is probed when discovery adds it (an updated record is a new worker: probed
// again) and, with interval_ns > 0, every interval_ns (--render-parity-interval-s).
// The verdict lands in the worker's FleetWorker: `render_parity` (shown in
// /v1/workers, infera_router_render_parity) and `renders_differently` (diverged: its
// token counts are estimates for decode input demand, and the planner does not credit
// its KV overlap). Outcomes are counted in infera_router_render_parity_probes_total.
//
// All exchanges run on the router's first event loop over the router's Upstream (the
// keep-alive HTTP client), never on the pick path. Without a chat rendering (no
// --router-tokenizer-path, or no chat template) nothing is probed: every worker stays
// "unknown", which counts as exact.
//
// Thread-safety: OnAdded() from any thread (discovery); Start() once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/types.h"
#include "http/asio.h"
#include "http/io_pool.h"
#include "router/plan/fleet.h"
#include "router/encode/render_parity.h"
#include "router/dispatch/upstream.h"

namespace infera::router {

class RouterMetrics;
class WorkerSet;

struct RenderParityOptions {
  int64_t interval_ns = 300'000'000'000;  // --render-parity-interval-s 300; 0: discovery only
  int64_t timeout_ns = 5'000'000'000;     // one probe's deadline
};

class RenderParityProber {
 public:
  // Answers larger than this are an error (the probe's ids are a few dozen).
  static constexpr uint64_t kMaxAnswerBytes = 1u << 20;

  // REQUIRES: every reference outlives the prober.
  RenderParityProber(RenderParityOptions options, http::IoPool& pool, Upstream& upstream,
                     const core::Clock& clock, const WorkerSet& workers, RouterMetrics& metrics);
  RenderParityProber(const RenderParityProber&) = delete;
  RenderParityProber& operator=(const RenderParityProber&) = delete;

  // Probes the workers known now, then those added, and every interval. nullopt: the
  // router cannot render chats; nothing is ever probed.
  void Start(std::optional<ProbeRendering> probe);
  // Discovery added `worker`: probe it now (once started).
  void OnAdded(std::shared_ptr<const FleetWorker> worker);

 private:
  http::Awaitable<void> Probe(std::shared_ptr<const FleetWorker> worker);
  http::Awaitable<void> Every();
  void Spawn(std::shared_ptr<const FleetWorker> worker);
  // Records one probe's outcome on the worker; logs a change of verdict.
  void Apply(const FleetWorker& worker, ProbeOutcome outcome, const std::string& detail);

  const RenderParityOptions options_;
  http::IoPool& pool_;
  Upstream& upstream_;
  const core::Clock& clock_;
  const WorkerSet& workers_;
  RouterMetrics& metrics_;
  ProbeRendering probe_;  // written once by Start, before started_
  std::atomic<bool> started_{false};
};

}  // namespace infera::router
