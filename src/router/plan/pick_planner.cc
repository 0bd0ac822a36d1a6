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
      selector_(policy, index.index()),
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
      for (size_t i = 0; i < pd_candidates_.size(); ++i) {
        if (pd_candidates_[i].target == t) return owners_[i];
      }
      return static_cast<const FleetWorker*>(nullptr);
    });
  });
}

bool PickPlanner::ResolveAdapter(const Fleet& fleet, RequestContext& ctx) {
  bool adapter = false;
  for (const auto& wk : fleet) {
    const auto& names = wk->record.lora_adapters;
    if (std::find(names.begin(), names.end(), ctx.api.model) != names.end()) {
      adapter = true;
      break;
    }
  }
  ctx.hash_keys.adapter = adapter ? core::KeyDigest(ctx.api.model) : 0;
  return adapter;
}

bool PickPlanner::Admits(const FleetWorker& wk, const RequestContext& ctx, PlanHistory& history,
                         int64_t now_ns, bool mixed_only, bool adapter) {
  history.any_worker = true;
  if (adapter) {
    const auto& names = wk.record.lora_adapters;
    if (std::find(names.begin(), names.end(), ctx.api.model) == names.end()) return false;
  } else if (!wk.record.model_name.empty() && wk.record.model_name != ctx.api.model) {
    return false;
  }
  // Prefill and decode workers are PlanPd's.
  if (mixed_only && wk.record.disagg_mode != discovery::DisaggMode::kMixed) return false;
  history.model_known = true;
  if (wk.retired.load(std::memory_order_relaxed)) return false;
  if (!wk.liveness.healthy()) return false;  // failed its active health checks
  if (std::find(history.tried.begin(), history.tried.end(), wk.record.worker_id) !=
      history.tried.end()) {
    return false;
  }
  return wk.health.WouldAllow(now_ns);
}

absl::StatusOr<PickPlan> PickPlanner::PlanMixed(RequestContext& ctx, const Fleet& fleet,
                                                PlanHistory& history) {
  const int64_t pick_start_ns = clock_.NowNs();
  const bool first = history.tried.empty();
  PickPlan plan;
  core::PickResult pick;
  std::optional<uint64_t> predicted;
  const FleetWorker* owner = nullptr;
  const bool adapter = ResolveAdapter(fleet, ctx);
  {
    absl::MutexLock lock(&mu_);
    candidates_.clear();
    owners_.clear();
    untrusted_.clear();
    for (const auto& wk : fleet) {
      if (!Admits(*wk, ctx, history, pick_start_ns, /*mixed_only=*/true, adapter)) continue;
      const bool untrusted = wk->renders_differently.load(std::memory_order_relaxed);
      for (core::TargetId t : wk->targets) {
        candidates_.push_back(t);
        owners_.push_back(wk.get());
        if (untrusted) untrusted_.push_back(t);
      }
    }
    if (candidates_.empty()) return absl::NotFoundError("");
    sessions_.Begin(ctx, pick_start_ns);
    if (std::optional<size_t> at = sessions_.Find(core::Role::kMixed, candidates_)) {
      candidates_.assign(1, candidates_[*at]);
      owners_.assign(1, owners_[*at]);
    }
    core::RoutingInput input;
    input.role = core::Role::kMixed;
    input.request_id = ctx.request_id;
    if (ctx.tokens) input.tokens = std::span<const core::TokenId>(*ctx.tokens);
    input.keys = ctx.hash_keys;
    input.estimated_tokens = ctx.api.estimated_tokens;
    input.image_keys = ctx.api.image_keys;
    input.overlap_untrusted = untrusted_;
    input.overlap_weight_factor = RetentionWeightFactor(ctx.api.cache_retention);
    size_t block_size = 0;
    if (approx_) approx_->Expire(pick_start_ns);
    // The lambda runs here, under mu_ (WithIndex calls it before returning): the
    // analysis cannot follow a lock into a callback, so it is told not to look.
    auto picked = index_.WithIndex([&](const core::KvIndex& index) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (input.keys.salt != 0) index.NoteSaltedTraffic();
      auto r = selector_.Pick(input, candidates_);
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
    const size_t idx = static_cast<size_t>(
        std::find(candidates_.begin(), candidates_.end(), pick.picked) - candidates_.begin());
    owner = owners_[idx];
    owner->health.Allow(pick_start_ns);
    pick.picked_name = owner->TargetName(owner->RankIndex(pick.picked));
    if (approx_ && pick.policy == core::Policy::kKvAware && input.tokens) {
      approx_->Record(pick.picked, *input.tokens, input.keys, pick_start_ns);
    }
    const std::string_view session = sessions_.Bind(pick.role, pick.picked);
    if (spdlog::should_log(spdlog::level::info)) {
      spdlog::info("{}{}", core::FormatPickLog(pick), session);
    }
    plan.guards = PickGuards(&mu_);
    plan.guards.AddActive(std::move(pick.guard));
  }
  // The owner is alive: `fleet` holds it.
  for (const auto& wk : fleet) {
    if (wk.get() == owner) {
      plan.legs.push_back(
          {core::Role::kMixed, wk, pick.picked, wk->DpRankOf(pick.picked), predicted});
      break;
    }
  }
  history.tried.push_back(owner->record.worker_id);
  ++history.plans;
  const size_t role = static_cast<size_t>(pick.role) % 3;
  owner->picks[role][owner->RankIndex(pick.picked)]->fetch_add(1, std::memory_order_relaxed);
  metrics_.ObservePick(pick.role, pick.cache_hits, pick.request_blocks);
  if (pick.policy == core::Policy::kKvAware) {
    metrics_.cache_control().CountPick(ctx.api.cache_retention, !ctx.api.image_keys.empty());
  }
  Receipt(ctx, pick_start_ns, pick.policy, {LegReceiptOf(pick)});
  if (first) {
    const int64_t now_ns = clock_.NowNs();
    metrics_.ObserveStages(ctx.parse_s, ctx.tokenize_s, (now_ns - pick_start_ns) * 1e-9,
                           (now_ns - ctx.start_ns) * 1e-9);
  }
  if (on_plan_) on_plan_();
  return plan;
}

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

void PickPlanner::Receipt(RequestContext& ctx, int64_t at_ns, core::Policy policy,
                          absl::InlinedVector<RouteLegReceipt, 2> legs) {
  RouteReceipt receipt{at_ns, ctx.request_id, policy, std::move(legs)};
  if (route_receipt_) ctx.route_receipt = FormatRouteReceipt(receipt);
  metrics_.history().RecordPick(std::move(receipt));
}

std::vector<PickPlanner::TargetLoad> PickPlanner::LoadOf(const FleetWorker& worker) const {
  absl::MutexLock lock(&mu_);
  std::vector<TargetLoad> out;
  out.reserve(worker.targets.size());
  for (core::TargetId t : worker.targets) {
    const core::LoadState& load = selector_.load();
    out.push_back({load.ActiveBlocks(t), load.PendingPrefillBlocks(t), load.Requests(t),
                   load.PrefillingRequests(t)});
  }
  return out;
}

void PickPlanner::EnableApprox(const core::ApproxConfig& config, events::SharedKvIndex& index) {
  absl::MutexLock lock(&mu_);
  approx_ = std::make_unique<ApproxRecorder>(config, index);
}

const ApproxCounters* PickPlanner::approx_counters() const {
  absl::MutexLock lock(&mu_);
  return approx_ ? &approx_->counters() : nullptr;
}

void PickPlanner::Retire(const FleetWorker& worker, events::KvEventSource& events) {
  absl::MutexLock lock(&mu_);
  worker.retired.store(true, std::memory_order_relaxed);
  demand_.Forget(worker);
  for (size_t r = 0; r < worker.targets.size(); ++r) {
    selector_.RemoveTarget(worker.targets[r]);
    if (approx_) approx_->RemoveTarget(worker.targets[r]);
    sessions_.RemoveTarget(worker.targets[r]);
    events.RemoveTarget(worker.KeyOf(r));
  }
}

void PickPlanner::SetCapacityBlocks(const FleetWorker& worker, size_t blocks) {
  absl::MutexLock lock(&mu_);
  for (core::TargetId t : worker.targets) selector_.load().SetCapacityBlocks(t, blocks);
}

void PickPlanner::RecordPrediction(const PickLeg& leg, uint64_t reported_tokens) {
  core::PredictionStats before, after;
  {
    absl::MutexLock lock(&mu_);
    // A worker removed since the pick: its target id may be another worker's now.
    if (leg.worker->retired.load(std::memory_order_relaxed)) return;
    core::PredictionTracker& tracker = selector_.predictions();
    before = tracker.Get(leg.target);
    tracker.Record(leg.target, *leg.predicted_cached_tokens, reported_tokens);
    after = tracker.Get(leg.target);
  }
  if (before.drifting != after.drifting) {
    const std::string name = leg.worker->TargetName(leg.worker->RankIndex(leg.target));
    if (after.drifting) {
      spdlog::warn(
          "target {}: its engine's reported cached tokens drift from the router's view "
          "(relative error {:.2f} over {} answers; predicted {} tokens, reported {}): events "
          "lost, or a hash seed, block size or chat template that does not match? Its "
          "overlap is trusted less until they agree",
          name, after.relative_error, after.samples, after.predicted_tokens, after.reported_tokens);
    } else {
      spdlog::info("target {}: predictions agree with its engine again (relative error {:.2f})",
                   name, after.relative_error);
    }
  }
}

std::vector<core::PredictionStats> PickPlanner::Predictions(const FleetWorker& worker) const {
  absl::MutexLock lock(&mu_);
  std::vector<core::PredictionStats> out;
  out.reserve(worker.targets.size());
  for (core::TargetId t : worker.targets) out.push_back(selector_.predictions().Get(t));
  return out;
}

double PickPlanner::PendingPrefillBlocks(core::TargetId target) const {
  absl::MutexLock lock(&mu_);
  return selector_.load().PendingPrefillBlocks(target);
}

size_t PickPlanner::PendingGuards() const {
  absl::MutexLock lock(&mu_);
  return selector_.load().PendingGuards();
}

size_t PickPlanner::ActiveBlocks(core::TargetId target) const {
  absl::MutexLock lock(&mu_);
  return selector_.load().ActiveBlocks(target);
}

std::vector<size_t> PickPlanner::ActiveBlocks(const FleetWorker& worker) const {
  absl::MutexLock lock(&mu_);
  std::vector<size_t> out;
  out.reserve(worker.targets.size());
  for (core::TargetId t : worker.targets) out.push_back(selector_.load().ActiveBlocks(t));
  return out;
}

std::vector<std::pair<uint64_t, uint64_t>> PickPlanner::Demand(const FleetWorker& worker) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(worker.targets.size());
  for (size_t r = 0; r < worker.targets.size(); ++r) {
    const std::string key = worker.TargetName(r);
    out.emplace_back(demand_.Tokens(key), demand_.Requests(key));
  }
  return out;
}

uint64_t PickPlanner::PendingDemandReservations() const {
  absl::MutexLock lock(&mu_);
  return demand_.LiveReservations();
}

std::vector<core::RemoteTargetLoad> PickPlanner::OwnLoad(const Fleet& fleet) const {
  std::vector<core::RemoteTargetLoad> out;
  absl::MutexLock lock(&mu_);
  for (const auto& w : fleet) {
    if (w->retired.load(std::memory_order_relaxed)) continue;
    for (size_t r = 0; r < w->targets.size(); ++r) {
      const core::TargetId t = w->targets[r];
      core::RemoteTargetLoad l;
      l.active_blocks = static_cast<int64_t>(selector_.load().ActiveBlocks(t));
      l.pending_prefill_blocks = selector_.load().PendingPrefillBlocks(t);
      if (demand_mode_ != core::DemandMode::kOff) {
        const std::string name = w->TargetName(r);
        l.demand_tokens = static_cast<int64_t>(demand_.Tokens(name));
        l.demand_requests = static_cast<int64_t>(demand_.Requests(name));
      }
      if (l.active_blocks == 0 && l.pending_prefill_blocks == 0 && l.demand_tokens == 0 &&
          l.demand_requests == 0) {
        continue;
      }
      const core::TargetKey key = w->KeyOf(r);
      l.worker_id = key.worker_id;
      l.dp_rank = key.dp_rank;
      out.push_back(std::move(l));
    }
  }
  return out;
}

void PickPlanner::SetRemoteLoad(
    const Fleet& fleet, absl::FunctionRef<core::RemoteLoad::Load(const core::TargetKey&)> remote) {
  absl::MutexLock lock(&mu_);
  for (const auto& w : fleet) {
    // A retired worker's targets are gone from the load state (ids may be reused).
    if (w->retired.load(std::memory_order_relaxed)) continue;
    for (size_t r = 0; r < w->targets.size(); ++r) {
      const core::RemoteLoad::Load l = remote(w->KeyOf(r));
      selector_.load().SetRemote(w->targets[r], static_cast<size_t>(l.active_blocks),
                                 l.pending_prefill_blocks);
      if (demand_mode_ != core::DemandMode::kOff) {
        demand_.SetRemote(w->TargetName(r), static_cast<uint64_t>(l.demand_tokens),
                          static_cast<uint64_t>(l.demand_requests));
      }
    }
  }
}

std::vector<std::pair<size_t, double>> PickPlanner::RemoteLoadOf(const FleetWorker& worker) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<size_t, double>> out;
  out.reserve(worker.targets.size());
  for (core::TargetId t : worker.targets) {
    out.emplace_back(selector_.load().RemoteActiveBlocks(t),
                     selector_.load().RemotePendingPrefillBlocks(t));
  }
  return out;
}

}  // namespace infera::router
