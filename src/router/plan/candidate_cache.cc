#include "router/plan/candidate_cache.h"

#include <algorithm>

#include "core/hashing.h"

namespace infera::router {

bool CandidateCache::SameFleet(const Fleet& fleet) const {
  if (fleet.size() != fleet_.size()) return false;
  for (size_t i = 0; i < fleet.size(); ++i) {
    if (fleet[i].get() != fleet_[i].get()) return false;
  }
  return true;
}

CandidateCache::Entry CandidateCache::Build(const Fleet& fleet, const std::string& model,
                                            bool mixed_only) {
  Entry e;
  const auto lists = [&](const FleetWorker& wk) {
    const auto& names = wk.record.lora_adapters;
    return std::find(names.begin(), names.end(), model) != names.end();
  };
  const bool adapter =
      std::any_of(fleet.begin(), fleet.end(), [&](const auto& wk) { return lists(*wk); });
  e.adapter_key = adapter ? core::KeyDigest(model) : 0;
  for (const auto& wk : fleet) {
    if (adapter ? !lists(*wk) : !wk->record.model_name.empty() && wk->record.model_name != model) {
      continue;
    }
    // Prefill and decode workers are PlanPd's.
    if (mixed_only && wk->record.disagg_mode != discovery::DisaggMode::kMixed) continue;
    e.model_known = true;
    e.workers.push_back(wk.get());
    e.first.push_back(e.candidates.size());
    const auto mode = static_cast<core::Role>(static_cast<uint8_t>(wk->record.disagg_mode));
    for (core::TargetId t : wk->targets) {
      e.candidates.push_back(t);
      e.owners.push_back(wk.get());
      if (!mixed_only) e.pd_candidates.push_back({t, mode, wk->record.disagg_protocol});
    }
  }
  e.first.push_back(e.candidates.size());
  return e;
}

const CandidateCache::Entry& CandidateCache::Get(const Fleet& fleet, const std::string& model,
                                                 bool mixed_only) {
  if (!SameFleet(fleet)) {
    fleet_ = fleet;
    entries_[0].clear();
    entries_[1].clear();
  }
  auto& entries = entries_[mixed_only ? 1 : 0];
  if (auto it = entries.find(model); it != entries.end()) return it->second;
  if (entries.size() >= kMaxEntries) entries.clear();
  return entries.emplace(model, Build(fleet, model, mixed_only)).first->second;
}

}  // namespace infera::router
