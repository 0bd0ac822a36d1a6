// PickPlanner::AdmissionPool and AdviseHold: the admission queue's view of a request's
// pool (doc/admission.md "Router wiring", item 3, and "Hold rule").
#include "router/plan/pick_planner.h"

namespace infera::router {
namespace {

// As AttemptLoop decides it: a prefill or decode worker serves the model.
bool ServedPd(const std::string& model, const Fleet& fleet) {
  for (const auto& wk : fleet) {
    if (wk->record.disagg_mode == discovery::DisaggMode::kMixed) continue;
    if (wk->record.model_name.empty() || wk->record.model_name == model) return true;
  }
  return false;
}

}  // namespace

std::string PickPlanner::AdmissionKey(const std::string& model, const Fleet& fleet) {
  return model + (ServedPd(model, fleet) ? "|prefill" : "|mixed");
}

std::span<const core::TargetId> PickPlanner::AdmissionCandidates(const std::string& model,
                                                                 const Fleet& fleet, bool pd) {
  RequestContext ctx;
  ctx.api.model = model;
  PlanHistory history;
  GatherCandidates(ctx, fleet, history, clock_.NowNs(), /*mixed_only=*/!pd);
  if (!pd) return cands_;
  // The prefill pool (a PD request's queueing is its prefill leg's).
  candidates_.clear();
  for (const core::PdCandidate& c : pd_cands_) {
    if (c.mode == core::Role::kPrefill) candidates_.push_back(c.target);
  }
  return candidates_;
}

PickPlanner::PoolLoad PickPlanner::AdmissionPool(const std::string& model, const Fleet& fleet) {
  const bool pd = ServedPd(model, fleet);
  PoolLoad out{model + (pd ? "|prefill" : "|mixed"), 0};
  absl::MutexLock lock(&mu_);
  std::span<const core::TargetId> pool = AdmissionCandidates(model, fleet, pd);
  if (pool.empty()) return out;
  out.min_load = index_.WithIndex([&](const core::KvIndex&) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return selector_.MinLoad(pool);
  });
  return out;
}

core::Selector::Hold PickPlanner::AdviseHold(const RequestContext& ctx, const Fleet& fleet,
                                             double threshold, double join_blocks,
                                             bool others_waiting) {
  const bool pd = ServedPd(ctx.api.model, fleet);
  absl::MutexLock lock(&mu_);
  std::span<const core::TargetId> pool = AdmissionCandidates(ctx.api.model, fleet, pd);
  if (pool.empty()) return core::Selector::Hold::kOffer;  // the plan answers it
  core::RoutingInput input = InputOf(ctx, clock_.NowNs());
  input.role = pd ? core::Role::kPrefill : core::Role::kMixed;
  return index_.WithIndex([&](const core::KvIndex&) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return selector_.AdviseHold(input, pool, threshold, join_blocks, others_waiting);
  });
}

}  // namespace infera::router
