// PickPlanner::PlanPd: one attempt over a fleet with prefill/decode workers
// (pick_planner.h).
#include <algorithm>

#include "router/metrics/router_metrics.h"
#include "router/plan/pick_planner.h"
#include "spdlog/spdlog.h"

namespace infera::router {
absl::StatusOr<PickPlan> PickPlanner::PlanPd(RequestContext& ctx, const Fleet& fleet,
                                             PlanHistory& history) {
  const int64_t pick_start_ns = clock_.NowNs();
  PickPlan plan;
  core::PdPlan pd;
  const FleetWorker* prefill_owner = nullptr;
  const FleetWorker* main_owner = nullptr;
  {
    absl::MutexLock lock(&mu_);
    GatherCandidates(ctx, fleet, history, pick_start_ns, /*mixed_only=*/false);
    if (pd_cands_.empty()) return absl::NotFoundError("");
    sessions_.Begin(ctx, pick_start_ns);  // pins the pools inside pd_planner_.Plan
    const core::RoutingInput input = InputOf(ctx, pick_start_ns);
    if (demand_mode_ != core::DemandMode::kOff) demand_.Begin(ctx);
    // Runs here, under mu_ (as in PlanMixed).
    auto planned = index_.WithIndex([&](const core::KvIndex& index) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (input.keys.salt != 0) index.NoteSaltedTraffic();
      return pd_planner_.Plan(input, pd_cands_);
    });
    if (!planned.ok()) {
      const absl::StatusCode code = planned.status().code();
      if (code == absl::StatusCode::kUnimplemented) return planned.status();
      return absl::UnavailableError(planned.status().message());
    }
    pd = *std::move(planned);
    plan.guards = PickGuards(&mu_, &on_load_lowered_, &clock_);
    plan.prefill_guards = PickGuards(&mu_, &on_load_lowered_, &clock_);
    if (pd.prefill) {
      prefill_owner = Claim(*pd.prefill, core::Role::kPrefill, pick_start_ns);
      plan.prefill_guards.AddActive(std::move(pd.prefill->guard));
    }
    main_owner = Claim(pd.main, pd.main.role, pick_start_ns);
    if (approx_ && pd.main.policy == core::Policy::kKvAware && input.tokens) {
      // The decode engine holds the transferred KV too.
      if (pd.prefill) approx_->Record(pd.prefill->picked, *input.tokens, input.keys, pick_start_ns);
      approx_->Record(pd.main.picked, *input.tokens, input.keys, pick_start_ns);
    }
    plan.guards.AddActive(std::move(pd.main.guard));
    // The decode leg's demand stays on the decode guards (whatever
    // --pd-prefill-guard-release says): released with them, exactly once.
    if (demand_mode_ != core::DemandMode::kOff && pd.main.role == core::Role::kDecode) {
      plan.guards.AddDemand(demand_.Book(pd.main, *main_owner));
    }
  }
  // No prediction for PD legs yet (the prefill leg could feed the tracker too).
  if (prefill_owner != nullptr) AddLeg(plan, fleet, *prefill_owner, *pd.prefill, std::nullopt, ctx);
  AddLeg(plan, fleet, *main_owner, pd.main, std::nullopt, ctx);
  absl::InlinedVector<RouteLegReceipt, 2> legs;
  if (pd.prefill) legs.push_back(LegReceiptOf(*pd.prefill));
  legs.push_back(LegReceiptOf(pd.main));
  Receipt(ctx, pick_start_ns, pd.main.policy, std::move(legs));
  // The plan's protocol: the decode (main) worker's record says which.
  plan.protocol = pd.kind == core::PdPlanKind::kMixed ? discovery::PdProtocol::kNone
                                                      : main_owner->record.pd_protocol;
  Finish(ctx, pick_start_ns, history.plans++ == 0);
  return plan;
}

}  // namespace infera::router
