// PickPlanner::AdmissionPool: the admission queue's view of a request's pool
// (doc/admission.md "Router wiring", item 3).
#include "router/plan/pick_planner.h"

namespace infera::router {

PickPlanner::PoolLoad PickPlanner::AdmissionPool(const std::string& model, const Fleet& fleet) {
  bool pd = false;  // as AttemptLoop decides it: a prefill or decode worker serves the model
  for (const auto& wk : fleet) {
    if (wk->record.disagg_mode == discovery::DisaggMode::kMixed) continue;
    if (wk->record.model_name.empty() || wk->record.model_name == model) pd = true;
  }
  PoolLoad out{model + (pd ? "|prefill" : "|mixed"), 0};
  RequestContext ctx;
  ctx.api.model = model;
  PlanHistory history;
  absl::MutexLock lock(&mu_);
  GatherCandidates(ctx, fleet, history, clock_.NowNs(), /*mixed_only=*/!pd);
  std::span<const core::TargetId> pool = cands_;
  if (pd) {
    // The prefill pool (a PD request's queueing is its prefill leg's).
    candidates_.clear();
    for (const core::PdCandidate& c : pd_cands_) {
      if (c.mode == core::Role::kPrefill) candidates_.push_back(c.target);
    }
    pool = candidates_;
  }
  if (pool.empty()) return out;
  out.min_load = index_.WithIndex([&](const core::KvIndex&) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return selector_.MinLoad(pool);
  });
  return out;
}

}  // namespace infera::router
