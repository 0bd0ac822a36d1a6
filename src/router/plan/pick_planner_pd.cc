// PickPlanner::PlanPd: one attempt over a fleet with prefill/decode workers
// (pick_planner.h).
#include "router/plan/pick_planner.h"

#include <algorithm>

#include "router/metrics/router_metrics.h"
#include "spdlog/spdlog.h"

namespace infera::router {

absl::StatusOr<PickPlan> PickPlanner::PlanPd(RequestContext& ctx, const Fleet& fleet,
                                             PlanHistory& history) {
  const int64_t pick_start_ns = clock_.NowNs();
  PickPlan plan;
  core::PdPlan pd;
  const FleetWorker* prefill_owner = nullptr;
  const FleetWorker* main_owner = nullptr;
  const bool adapter = ResolveAdapter(fleet, ctx);
  {
    absl::MutexLock lock(&mu_);
    pd_candidates_.clear();
    owners_.clear();
    untrusted_.clear();
    for (const auto& wk : fleet) {
      if (!Admits(*wk, ctx, history, pick_start_ns, /*mixed_only=*/false, adapter)) continue;
      const auto mode = static_cast<core::Role>(static_cast<uint8_t>(wk->record.disagg_mode));
      const bool untrusted = wk->renders_differently.load(std::memory_order_relaxed);
      for (core::TargetId t : wk->targets) {
        pd_candidates_.push_back({t, mode, wk->record.disagg_protocol});
        owners_.push_back(wk.get());
        if (untrusted) untrusted_.push_back(t);
      }
    }
    if (pd_candidates_.empty()) return absl::NotFoundError("");
    sessions_.Begin(ctx, pick_start_ns);  // pins the pools inside pd_planner_.Plan
    core::RoutingInput input;
    input.request_id = ctx.request_id;
    if (ctx.tokens) input.tokens = std::span<const core::TokenId>(*ctx.tokens);
    input.keys = ctx.hash_keys;
    input.estimated_tokens = ctx.api.estimated_tokens;
    input.image_keys = ctx.api.image_keys;
    input.overlap_untrusted = untrusted_;
    input.overlap_weight_factor = RetentionWeightFactor(ctx.api.cache_retention);
    if (approx_) approx_->Expire(pick_start_ns);
    if (demand_mode_ != core::DemandMode::kOff) demand_.Begin(ctx);
    // Runs here, under mu_ (as in PlanMixed).
    auto planned = index_.WithIndex([&](const core::KvIndex& index) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (input.keys.salt != 0) index.NoteSaltedTraffic();
      return pd_planner_.Plan(input, pd_candidates_);
    });
    if (!planned.ok()) {
      const absl::StatusCode code = planned.status().code();
      if (code == absl::StatusCode::kUnimplemented) return planned.status();
      return absl::UnavailableError(planned.status().message());
    }
    pd = *std::move(planned);
    auto owner_of = [&](core::TargetId t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (size_t i = 0; i < pd_candidates_.size(); ++i) {
        if (pd_candidates_[i].target == t) return owners_[i];
      }
      return static_cast<const FleetWorker*>(nullptr);
    };
    plan.guards = PickGuards(&mu_);
    plan.prefill_guards = PickGuards(&mu_);
    const bool log = spdlog::should_log(spdlog::level::info);
    if (pd.prefill) {
      prefill_owner = owner_of(pd.prefill->picked);
      prefill_owner->health.Allow(pick_start_ns);
      pd.prefill->picked_name =
          prefill_owner->TargetName(prefill_owner->RankIndex(pd.prefill->picked));
      const std::string_view session = sessions_.Bind(core::Role::kPrefill, pd.prefill->picked);
      if (log) spdlog::info("{}{}", core::FormatPickLog(*pd.prefill), session);
      plan.prefill_guards.AddActive(std::move(pd.prefill->guard));
    }
    main_owner = owner_of(pd.main.picked);
    main_owner->health.Allow(pick_start_ns);
    pd.main.picked_name = main_owner->TargetName(main_owner->RankIndex(pd.main.picked));
    if (approx_ && pd.main.policy == core::Policy::kKvAware && input.tokens) {
      // The decode engine holds the transferred KV too.
      if (pd.prefill) approx_->Record(pd.prefill->picked, *input.tokens, input.keys, pick_start_ns);
      approx_->Record(pd.main.picked, *input.tokens, input.keys, pick_start_ns);
    }
    const std::string_view session = sessions_.Bind(pd.main.role, pd.main.picked);
    if (log) spdlog::info("{}{}", core::FormatPickLog(pd.main), session);
    plan.guards.AddActive(std::move(pd.main.guard));
    // The decode leg's demand stays on the decode guards (whatever
    // --pd-prefill-guard-release says): released with them, exactly once.
    if (demand_mode_ != core::DemandMode::kOff && pd.main.role == core::Role::kDecode) {
      plan.guards.AddDemand(demand_.Book(pd.main, *main_owner));
    }
  }
  // The owners are alive: `fleet` holds them.
  auto add_leg = [&](const FleetWorker* owner, const core::PickResult& pick) {
    for (const auto& wk : fleet) {
      if (wk.get() == owner) {
        // No prediction for PD legs yet (the prefill leg could feed the tracker too).
        plan.legs.push_back({pick.role, wk, pick.picked, wk->DpRankOf(pick.picked), std::nullopt});
        break;
      }
    }
    const size_t role = static_cast<size_t>(pick.role) % 3;
    owner->picks[role][owner->RankIndex(pick.picked)]->fetch_add(1, std::memory_order_relaxed);
    metrics_.ObservePick(pick.role, pick.cache_hits, pick.request_blocks);
    if (pick.policy == core::Policy::kKvAware) {
      metrics_.cache_control().CountPick(ctx.api.cache_retention, !ctx.api.image_keys.empty());
    }
  };
  if (prefill_owner != nullptr) add_leg(prefill_owner, *pd.prefill);
  add_leg(main_owner, pd.main);
  absl::InlinedVector<RouteLegReceipt, 2> legs;
  if (pd.prefill) legs.push_back(LegReceiptOf(*pd.prefill));
  legs.push_back(LegReceiptOf(pd.main));
  Receipt(ctx, pick_start_ns, pd.main.policy, std::move(legs));
  switch (main_owner->record.pd_protocol) {
    case discovery::PdProtocol::kSglangBootstrap:
      plan.protocol = PlanProtocol::kSglangBootstrap;
      break;
    case discovery::PdProtocol::kVllmNixl:
      plan.protocol = PlanProtocol::kVllmNixl;
      break;
    case discovery::PdProtocol::kVllmMooncake:
      plan.protocol = PlanProtocol::kVllmMooncake;
      break;
    case discovery::PdProtocol::kNone:
      plan.protocol = PlanProtocol::kMixed;
      break;
  }
  if (pd.kind == core::PdPlanKind::kMixed) plan.protocol = PlanProtocol::kMixed;
  if (history.plans++ == 0) {
    const int64_t now_ns = clock_.NowNs();
    metrics_.ObserveStages(ctx.parse_s, ctx.tokenize_s, (now_ns - pick_start_ns) * 1e-9,
                           (now_ns - ctx.start_ns) * 1e-9);
  }
  if (on_plan_) on_plan_();
  return plan;
}

}  // namespace infera::router
