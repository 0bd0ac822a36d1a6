// PickPlanner's reads for the admin views, metrics and replica sync, and its
// per-worker state changes (pick_planner.h).
#include "router/plan/pick_planner.h"

#include <algorithm>

#include "router/metrics/router_metrics.h"
#include "spdlog/spdlog.h"

namespace infera::router {

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

void PickPlanner::SetMaxSeqs(const FleetWorker& worker, size_t seqs) {
  absl::MutexLock lock(&mu_);
  for (core::TargetId t : worker.targets) selector_.load().SetMaxSeqs(t, seqs);
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
