#include "router/plan/session_binder.h"

#include <algorithm>

namespace infera::router {

SessionBinder::SessionBinder(const core::SessionConfig& config, SessionMetrics& metrics)
    : table_(config), metrics_(metrics) {}

void SessionBinder::Begin(const RequestContext& ctx, int64_t now_ns) {
  now_ns_ = now_ns;
  key_.reset();
  if (table_.config().mode == core::SessionMode::kOff || ctx.api.session_id.empty()) return;
  key_ = core::SessionKey(ctx.api.model, ctx.api.session_id);
}

std::optional<size_t> SessionBinder::Find(core::Role role,
                                          std::span<const core::TargetId> candidates) {
  if (!Active(role)) return std::nullopt;
  const std::optional<core::TargetId> bound = table_.Bound(*key_, SlotOf(role), now_ns_);
  if (!bound) return std::nullopt;
  auto it = std::find(candidates.begin(), candidates.end(), *bound);
  if (it == candidates.end()) return std::nullopt;
  return static_cast<size_t>(it - candidates.begin());
}

void SessionBinder::Pin(core::Role role, std::vector<core::TargetId>& candidates) {
  if (Active(role)) table_.Narrow(*key_, SlotOf(role), now_ns_, candidates);
}

std::string_view SessionBinder::Bind(core::Role role, core::TargetId picked) {
  if (!Active(role)) return "";
  const core::SessionOutcome outcome = table_.Bind(*key_, SlotOf(role), picked, now_ns_);
  metrics_.Set(table_.Stats());
  switch (outcome) {
    case core::SessionOutcome::kNew:
      return " session=new";
    case core::SessionOutcome::kHit:
      return " session=hit";
    case core::SessionOutcome::kRebound:
      return " session=rebound";
  }
  return "";
}

}  // namespace infera::router
