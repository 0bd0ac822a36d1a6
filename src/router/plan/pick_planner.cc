#include "router/plan/pick_planner.h"

#include <algorithm>

#include "router/metrics/router_metrics.h"
#include "spdlog/spdlog.h"

namespace infera::router {

PickPlanner::PickPlanner(const core::PolicyConfig& policy, const events::SharedKvIndex& index,
                         const core::Clock& clock, RouterMetrics& metrics, core::PdConfig pd,
                         const core::SessionConfig& sessions, DemandOptions demand)
    : index_(index),
      clock_(clock),
      metrics_(metrics),
      selector_(policy, index.index(), &clock),
      pd_planner_(selector_, index.index(), pd),
      demand_mode_(demand.mode),
      demand_(demand, metrics),
      sessions_(sessions, metrics.sessions()) {
  // Plan() runs under mu_.
  pd_planner_.set_pin([this](core::Role pool, std::vector<core::TargetId>& candidates)
                          ABSL_NO_THREAD_SAFETY_ANALYSIS { sessions_.Pin(pool, candidates); });
  if (demand_mode_ == core::DemandMode::kOff) return;
  // Decode input demand: every decode pick of PlanPd (called under mu_ from Plan).
  pd_planner_.set_choose_decode([this](const core::RoutingInput&,
                                       std::span<const core::TargetId> decode,
                                       const core::PickResult& original) {
    mu_.AssertHeld();
    return demand_.Choose(decode, original, [this](core::TargetId t) {
      mu_.AssertHeld();
      return OwnerOf(t);
    });
  });
}

bool PickPlanner::Admits(const FleetWorker& wk, const PlanHistory& history, int64_t now_ns) {
  if (wk.retired.load(std::memory_order_relaxed)) return false;
  if (!wk.liveness.healthy()) return false;  // failed its active health checks
  if (std::find(history.tried.begin(), history.tried.end(), wk.record.worker_id) !=
      history.tried.end()) {
    return false;
  }
  return wk.health.WouldAllow(now_ns);
}

void PickPlanner::GatherCandidates(RequestContext& ctx, const Fleet& fleet, PlanHistory& history,
                                   int64_t now_ns, bool mixed_only) {
  const CandidateCache::Entry& e = cache_.Get(fleet, ctx.api.model, mixed_only);
  ctx.hash_keys.adapter = e.adapter_key;
  if (!fleet.empty()) history.any_worker = true;
  if (e.model_known) history.model_known = true;
  candidates_.clear();
  pd_candidates_.clear();
  owners_.clear();
  untrusted_.clear();
  // The admitted workers' targets: the cache's lists when every worker is admitted,
  // else copied from them in runs of consecutive ones.
  size_t run = 0;
  bool copied = false;
  const auto copy_run = [&](size_t end) {
    copied = true;
    mu_.AssertHeld();  // called here, under mu_
    candidates_.insert(candidates_.end(), e.candidates.begin() + run, e.candidates.begin() + end);
    owners_.insert(owners_.end(), e.owners.begin() + run, e.owners.begin() + end);
    if (!mixed_only) {
      pd_candidates_.insert(pd_candidates_.end(), e.pd_candidates.begin() + run,
                            e.pd_candidates.begin() + end);
    }
  };
  for (size_t i = 0; i < e.workers.size(); ++i) {
    const FleetWorker& wk = *e.workers[i];
    if (!Admits(wk, history, now_ns)) {
      copy_run(e.first[i]);
      run = e.first[i + 1];
      continue;
    }
    if (wk.renders_differently.load(std::memory_order_relaxed)) {
      untrusted_.insert(untrusted_.end(), wk.targets.begin(), wk.targets.end());
    }
  }
  if (!copied) {
    cands_ = e.candidates;
    owns_ = e.owners;
    pd_cands_ = e.pd_candidates;
    return;
  }
  copy_run(e.first.back());
  cands_ = candidates_;
  owns_ = owners_;
  pd_cands_ = pd_candidates_;
}

core::RoutingInput PickPlanner::InputOf(const RequestContext& ctx, int64_t now_ns) {
  core::RoutingInput input;
  input.request_id = ctx.request_id;
  if (ctx.tokens) input.tokens = std::span<const core::TokenId>(*ctx.tokens);
  input.keys = ctx.hash_keys;
  input.estimated_tokens = ctx.api.estimated_tokens;
  input.image_keys = ctx.api.image_keys;
  input.overlap_untrusted = untrusted_;
  input.overlap_weight_factor = RetentionWeightFactor(ctx.api.cache_retention);
  // The pruned pick (doc/selection.md "Pruned pick"): the planner, the pick log, the
  // metrics and the receipt read the winner and the runner-up's cost only (the decode
  // demand chooser asks PdPlanner for exact costs).
  input.exact_costs = false;
  if (approx_) approx_->Expire(now_ns);
  return input;
}

const FleetWorker* PickPlanner::OwnerOf(core::TargetId target) const {
  for (size_t i = 0; i < cands_.size(); ++i) {
    if (cands_[i] == target) return owns_[i];
  }
  return nullptr;
}

const FleetWorker* PickPlanner::Claim(core::PickResult& pick, core::Role role, int64_t now_ns) {
  const FleetWorker* owner = OwnerOf(pick.picked);
  owner->health.Allow(now_ns);
  pick.picked_name = owner->TargetName(owner->RankIndex(pick.picked));
  const std::string_view session = sessions_.Bind(role, pick.picked);
  if (spdlog::should_log(spdlog::level::info)) {
    spdlog::info("{}{}", core::FormatPickLog(pick), session);
  }
  return owner;
}

void PickPlanner::AddLeg(PickPlan& plan, const Fleet& fleet, const FleetWorker& owner,
                         const core::PickResult& pick, std::optional<uint64_t> predicted,
                         const RequestContext& ctx) {
  // The owner is alive: `fleet` holds it.
  for (const auto& wk : fleet) {
    if (wk.get() == &owner) {
      plan.legs.push_back({pick.role, wk, pick.picked, wk->DpRankOf(pick.picked), predicted});
      break;
    }
  }
  const size_t role = static_cast<size_t>(pick.role) % 3;
  owner.picks[role][owner.RankIndex(pick.picked)]->fetch_add(1, std::memory_order_relaxed);
  metrics_.ObservePick(pick.role, pick.cache_hits, pick.request_blocks);
  if (pick.policy == core::Policy::kKvAware) {
    metrics_.cache_control().CountPick(ctx.api.cache_retention, !ctx.api.image_keys.empty());
  }
}

void PickPlanner::Finish(const RequestContext& ctx, int64_t pick_start_ns, bool first) {
  if (first) {
    const int64_t now_ns = clock_.NowNs();
    metrics_.ObserveStages(ctx.parse_s, ctx.tokenize_s, (now_ns - pick_start_ns) * 1e-9,
                           (now_ns - ctx.start_ns) * 1e-9);
  }
  if (first && ctx.on_planned) ctx.on_planned();
  if (on_plan_) on_plan_();
}

absl::StatusOr<PickPlan> PickPlanner::PlanMixed(RequestContext& ctx, const Fleet& fleet,
                                                PlanHistory& history) {
  const int64_t pick_start_ns = clock_.NowNs();
  const bool first = history.tried.empty();
  PickPlan plan;
  core::PickResult pick;
  std::optional<uint64_t> predicted;
  const FleetWorker* owner = nullptr;
  {
    absl::MutexLock lock(&mu_);
    GatherCandidates(ctx, fleet, history, pick_start_ns, /*mixed_only=*/true);
    if (cands_.empty()) return absl::NotFoundError("");
    sessions_.Begin(ctx, pick_start_ns);
    if (std::optional<size_t> at = sessions_.Find(core::Role::kMixed, cands_)) {
      cands_ = cands_.subspan(*at, 1);
      owns_ = owns_.subspan(*at, 1);
    }
    core::RoutingInput input = InputOf(ctx, pick_start_ns);
    input.role = core::Role::kMixed;
    size_t block_size = 0;
    // The lambda runs here, under mu_ (WithIndex calls it before returning): the
    // analysis cannot follow a lock into a callback, so it is told not to look.
    auto picked = index_.WithIndex([&](const core::KvIndex& index) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (input.keys.salt != 0) index.NoteSaltedTraffic();
      auto r = selector_.Pick(input, cands_);
      if (r.ok()) block_size = index.BlockSize(r->picked);
      return r;
    });
    if (!picked.ok()) return absl::UnavailableError(picked.status().message());
    pick = std::move(*picked);
    // Only a kv-aware pick of a text prompt consulted the view's overlap.
    if (pick.policy == core::Policy::kKvAware && ctx.tokens && ctx.api.image_keys.empty() &&
        block_size > 0) {
      predicted = core::PredictedHitTokens(pick.cache_hits, ctx.tokens->size(), block_size);
    }
    owner = Claim(pick, pick.role, pick_start_ns);
    if (approx_ && pick.policy == core::Policy::kKvAware && input.tokens) {
      approx_->Record(pick.picked, *input.tokens, input.keys, pick_start_ns);
    }
    plan.guards = PickGuards(&mu_, &on_load_lowered_, &clock_);
    plan.guards.AddActive(std::move(pick.guard));
  }
  AddLeg(plan, fleet, *owner, pick, predicted, ctx);
  history.tried.push_back(owner->record.worker_id);
  ++history.plans;
  Receipt(ctx, pick_start_ns, pick.policy, {LegReceiptOf(pick)});
  Finish(ctx, pick_start_ns, first);
  return plan;
}

void PickPlanner::Receipt(RequestContext& ctx, int64_t at_ns, core::Policy policy,
                          absl::InlinedVector<RouteLegReceipt, 2> legs) {
  RouteReceipt receipt{at_ns, ctx.request_id, policy, std::move(legs)};
  if (route_receipt_) ctx.route_receipt = FormatRouteReceipt(receipt);
  metrics_.history().RecordPick(std::move(receipt));
}

}  // namespace infera::router
