// PickPlanner: turns a request and a fleet snapshot into a PickPlan.
//
// One plan = one attempt. The planner owns the core::Selector (policy, load state,
// image affinity) behind the pick mutex, the one global lock of the request path:
// a plan takes it once (candidate filter, breaker admission, Selector::Pick with the
// KV index read-locked inside), and the plan's guards take it once more to release.
// Nothing holds it across I/O.
//
// Candidates of a mixed plan: the targets (DP ranks) of workers that serve the
// request's model (or any model when the record names none) — or, when `model` is a
// LoRA adapter some worker lists (record lora_adapters), the workers listing it: the
// request's blocks then hash with the adapter (ctx.hash_keys, doc/hashing.md) —, are
// not decode-only, were not tried by an earlier attempt of the same request, are not
// retired, pass their active health checks (WorkerLiveness), and whose breaker admits a
// request now.
//
// A PD plan (PlanPd) runs core::PdPlanner over the same selector: candidates of every
// disagg_mode (same filters), a prefill and a decode leg and the pair's protocol, or
// one leg (decode-only, or mixed without a complete pair); doc/pd.md §2.
//
// Extension points (doc/router-pipeline.md): decode-demand
// reservations are taken here and handed to the plan's PickGuards; session affinity
// (SessionBinder, doc/session-affinity.md) narrows each pool to the session's bound
// target before Selector::Pick and records where the session went.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/approx_cache.h"
#include "core/clock.h"
#include "core/pd_planner.h"
#include "core/remote_load.h"
#include "core/selector.h"
#include "events/kv_event_source.h"
#include "events/shared_kv_index.h"
#include "router/admin/fleet_history.h"
#include "router/plan/approx_recorder.h"
#include "router/plan/candidate_cache.h"
#include "router/plan/decode_demand_routing.h"
#include "router/plan/fleet.h"
#include "router/plan/pick_plan.h"
#include "router/plan/session_binder.h"
#include "router/request/request_context.h"

namespace infera::router {

class RouterMetrics;

// What the planner saw over one request's attempts (the final error depends on it).
struct PlanHistory {
  std::vector<std::string> tried;  // worker ids picked so far (PD: those that failed)
  int plans = 0;                   // plans made (PD: stage timings are the first's)
  bool any_worker = false;         // the fleet was not empty
  bool model_known = false;        // some non-decode worker serves the model
};

class PickPlanner {
 public:
  // REQUIRES: policy.Validate().ok(); index, clock and metrics outlive the planner.
  // REQUIRES: sessions.Validate().ok().
  PickPlanner(const core::PolicyConfig& policy, const events::SharedKvIndex& index,
              const core::Clock& clock, RouterMetrics& metrics, core::PdConfig pd = {},
              const core::SessionConfig& sessions = {}, DemandOptions demand = {});
  PickPlanner(const PickPlanner&) = delete;
  PickPlanner& operator=(const PickPlanner&) = delete;

  // Plans one mixed attempt. NotFound (empty message) when no candidate is left
  // (`history` says why); Unavailable with the selector's message when it refused.
  absl::StatusOr<PickPlan> PlanMixed(RequestContext& ctx, const Fleet& fleet, PlanHistory& history)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Plans one attempt over a fleet with prefill/decode workers (core::PdPlanner):
  // two legs (prefill, decode) with the pair's protocol, or one leg (role decode:
  // conditional disaggregation; role mixed: no complete pair). NotFound (empty
  // message) when no candidate is left; Unavailable (a pool is missing) and
  // Unimplemented (protocols disagree) with the planner's message.
  absl::StatusOr<PickPlan> PlanPd(RequestContext& ctx, const Fleet& fleet, PlanHistory& history)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Approximate mode (doc/approx-mode.md): from now on every pick predicts its prompt
  // cached on the picked targets in `index` (the one the planner reads). Call it once,
  // before the first plan. REQUIRES: config.ttl_ns > 0, config.max_blocks > 0.
  void EnableApprox(const core::ApproxConfig& config, events::SharedKvIndex& index)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Approximate mode's counters; nullptr when it is off.
  const ApproxCounters* approx_counters() const;

  // Marks the worker retired and drops its targets from the load state and from
  // `events` (hence the index), all under the pick mutex: no plan can pick a target
  // whose index id is being freed.
  void Retire(const FleetWorker& worker, events::KvEventSource& events) ABSL_LOCKS_EXCLUDED(mu_);

  // Each target of `worker` holds `blocks` KV blocks (its record's num_gpu_blocks):
  // the KV-pressure term's capacity (doc/selection.md).
  void SetCapacityBlocks(const FleetWorker& worker, size_t blocks) ABSL_LOCKS_EXCLUDED(mu_);
  // Each target of `worker` runs at most `seqs` sequences (--worker-max-num-seqs): the
  // sequence-slot term's limit (doc/selection.md).
  void SetMaxSeqs(const FleetWorker& worker, size_t seqs) ABSL_LOCKS_EXCLUDED(mu_);

  // One answer's reported cached tokens vs the leg's prediction
  // (core::PredictionTracker); a target that starts or stops drifting is logged.
  // REQUIRES: leg.predicted_cached_tokens is set.
  void RecordPrediction(const PickLeg& leg, uint64_t reported_tokens) ABSL_LOCKS_EXCLUDED(mu_);
  // The prediction statistics of each target of `worker`, in rank order.
  std::vector<core::PredictionStats> Predictions(const FleetWorker& worker) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Guards not yet released (0 when idle: no leaked load).
  size_t PendingGuards() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t ActiveBlocks(core::TargetId target) const ABSL_LOCKS_EXCLUDED(mu_);
  double PendingPrefillBlocks(core::TargetId target) const ABSL_LOCKS_EXCLUDED(mu_);
  // Active blocks of each target of `worker`, in rank order.
  std::vector<size_t> ActiveBlocks(const FleetWorker& worker) const ABSL_LOCKS_EXCLUDED(mu_);
  // Decode input demand: --decode-input-demand; each target's (in-flight input tokens,
  // held requests), in rank order; reservations not yet released (0 when idle).
  core::DemandMode demand_mode() const { return demand_mode_; }
  std::vector<std::pair<uint64_t, uint64_t>> Demand(const FleetWorker& worker) const
      ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t PendingDemandReservations() const ABSL_LOCKS_EXCLUDED(mu_);

  // Router replicas (--router-replica-sync, doc/replica-sync.md).
  // This replica's own load on every target of `fleet` that holds any (active blocks,
  // pending prefill blocks, decode demand tokens and requests): what it publishes.
  std::vector<core::RemoteTargetLoad> OwnLoad(const Fleet& fleet) const ABSL_LOCKS_EXCLUDED(mu_);
  // Sets the other replicas' load on every target of `fleet` (remote(key) for each;
  // a key it does not name has none), in one pass under the pick mutex.
  void SetRemoteLoad(const Fleet& fleet,
                     absl::FunctionRef<core::RemoteLoad::Load(const core::TargetKey&)> remote)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The other replicas' (active blocks, pending prefill blocks) on each target of
  // `worker`, in rank order.
  std::vector<std::pair<size_t, double>> RemoteLoadOf(const FleetWorker& worker) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Called after every plan, outside the pick mutex (the replica sync's wake-up).
  // Set it once, before the first plan.
  void set_on_plan(std::function<void()> on_plan) { on_plan_ = std::move(on_plan); }
  // Called after a guard's PrefillDone or Release, outside the pick mutex (the
  // admission queue's drain). Set it once, before the first plan.
  void set_on_load_lowered(std::function<void()> fn) { on_load_lowered_ = std::move(fn); }
  // The admission queue's pool for `model` (doc/admission.md "Router wiring", item 3):
  // "<model>|prefill" when a prefill or decode worker serves it (its prefill
  // candidates), else "<model>|mixed"; and the least pending prefill over the pool's
  // candidates (Selector::MinLoad; 0 when there are none).
  struct PoolLoad {
    std::string key;
    double min_load = 0;
  };
  PoolLoad AdmissionPool(const std::string& model, const Fleet& fleet) ABSL_LOCKS_EXCLUDED(mu_);
  // The pool key alone (no lock): AdmissionPool(model, fleet).key.
  static std::string AdmissionKey(const std::string& model, const Fleet& fleet);
  // The admission queue's advice for the request (core::Selector::AdviseHold over its
  // pool's candidates: `threshold`, `join_blocks`, whether others wait in the pool).
  core::Selector::Hold AdviseHold(const RequestContext& ctx, const Fleet& fleet, double threshold,
                                  double join_blocks, bool others_waiting) ABSL_LOCKS_EXCLUDED(mu_);
  // --route-receipt: every plan sets ctx.route_receipt (the X-Infera-Route value).
  // Set it once, before the first plan. Receipts go to the fleet view either way.
  void set_route_receipt(bool on) { route_receipt_ = on; }

  // This replica's load on one target, as the fleet view shows it.
  struct TargetLoad {
    size_t active_blocks = 0;
    double pending_prefill_blocks = 0;
    size_t requests = 0;             // in flight (guards not yet released)
    size_t prefilling_requests = 0;  // of those, not yet past their prefill
  };
  // The load of each target of `worker`, in rank order.
  std::vector<TargetLoad> LoadOf(const FleetWorker& worker) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The dynamic half of the candidate filter (the static half: CandidateCache):
  // retired, health checks, tried, breaker.
  static bool Admits(const FleetWorker& wk, const PlanHistory& history, int64_t now_ns);
  // The admitted targets of `fleet` as cands_ (and, for a PD plan, pd_cands_), their
  // owns_ and untrusted_; sets ctx.hash_keys.adapter. Notes in `history` what the
  // fleet has. When every worker is admitted the spans are the cache entry's own lists
  // (no per-pick copy of the fleet's targets; valid until the next cache_.Get).
  // The admission pool's candidates for `model` (cands_, or the prefill candidates in
  // candidates_ when `pd`).
  std::span<const core::TargetId> AdmissionCandidates(const std::string& model, const Fleet& fleet,
                                                      bool pd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GatherCandidates(RequestContext& ctx, const Fleet& fleet, PlanHistory& history,
                        int64_t now_ns, bool mixed_only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The selector's input for `ctx` over the gathered candidates; expires approximate
  // predictions due at `now_ns`.
  core::RoutingInput InputOf(const RequestContext& ctx, int64_t now_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker that owns a gathered candidate; null when `target` is none.
  const FleetWorker* OwnerOf(core::TargetId target) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A picked target: its breaker admits the attempt, the pick is named, bound to the
  // session (as `role`) and logged. Returns its owner.
  const FleetWorker* Claim(core::PickResult& pick, core::Role role, int64_t now_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the leg of `pick` to `plan` and counts the pick (owner's per-rank picks,
  // metrics). REQUIRES: `fleet` holds `owner`.
  void AddLeg(PickPlan& plan, const Fleet& fleet, const FleetWorker& owner,
              const core::PickResult& pick, std::optional<uint64_t> predicted,
              const RequestContext& ctx);
  // After a plan: the stage timings (`first`: the request's first plan) and on_plan_.
  void Finish(const RequestContext& ctx, int64_t pick_start_ns, bool first);
  // One plan's route receipt: to the fleet view's history, and to ctx with --route-receipt.
  void Receipt(RequestContext& ctx, int64_t at_ns, core::Policy policy,
               absl::InlinedVector<RouteLegReceipt, 2> legs) ABSL_LOCKS_EXCLUDED(mu_);

  const events::SharedKvIndex& index_;
  const core::Clock& clock_;
  RouterMetrics& metrics_;

  mutable absl::Mutex mu_;
  core::Selector selector_ ABSL_GUARDED_BY(mu_);
  core::PdPlanner pd_planner_ ABSL_GUARDED_BY(mu_);
  const core::DemandMode demand_mode_;
  DecodeDemandRouting demand_ ABSL_GUARDED_BY(mu_);
  // The static candidates per fleet snapshot and model.
  CandidateCache cache_ ABSL_GUARDED_BY(mu_);
  // The gathered candidates (GatherCandidates), and the per-pick copies they point
  // into when some worker is not admitted (reused).
  std::span<const core::TargetId> cands_ ABSL_GUARDED_BY(mu_);
  std::span<const FleetWorker* const> owns_ ABSL_GUARDED_BY(mu_);
  std::span<const core::PdCandidate> pd_cands_ ABSL_GUARDED_BY(mu_);
  std::vector<core::TargetId> candidates_ ABSL_GUARDED_BY(mu_);
  std::vector<const FleetWorker*> owners_ ABSL_GUARDED_BY(mu_);
  std::vector<core::PdCandidate> pd_candidates_ ABSL_GUARDED_BY(mu_);
  // Candidates of workers whose render parity diverged: overlap not credited.
  std::vector<core::TargetId> untrusted_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ApproxRecorder> approx_ ABSL_GUARDED_BY(mu_);  // null: mode off
  // --session-affinity: narrows each pool to the session's bound target (PD: the
  // planner's pin seam), records the picks.
  SessionBinder sessions_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_plan_;
  std::function<void()> on_load_lowered_;  // read by every PickGuards
  bool route_receipt_ = false;
};

}  // namespace infera::router
