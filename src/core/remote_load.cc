#include "core/remote_load.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace infera::core {

const char* RemoteApplyName(RemoteApply result) {
  switch (result) {
    case RemoteApply::kApplied:
      return "applied";
    case RemoteApply::kSelf:
      return "self";
    case RemoteApply::kStale:
      return "stale";
    case RemoteApply::kGap:
      return "gap";
    case RemoteApply::kUnsynced:
      return "unsynced";
    case RemoteApply::kRejected:
      return "rejected";
  }
  return "rejected";
}

RemoteLoad::RemoteLoad(RemoteLoadOptions options) : options_(std::move(options)) {}

bool RemoteLoad::Valid(const RemoteLoadMessage& message) const {
  if (message.version != 1) return false;
  if (message.replica.empty() || message.replica.size() > options_.max_id_bytes) return false;
  if (message.targets.size() > options_.max_targets_per_message) return false;
  const int64_t bound = options_.max_abs_value;
  auto in_range = [bound](int64_t v) { return v >= -bound && v <= bound; };
  for (const RemoteTargetLoad& t : message.targets) {
    if (t.worker_id.empty() || t.worker_id.size() > options_.max_id_bytes) return false;
    if (!std::isfinite(t.pending_prefill_blocks) ||
        std::abs(t.pending_prefill_blocks) > static_cast<double>(bound)) {
      return false;
    }
    if (!in_range(t.active_blocks) || !in_range(t.demand_tokens) || !in_range(t.demand_requests)) {
      return false;
    }
    if (message.kind == RemoteLoadKind::kSnapshot &&
        (t.active_blocks < 0 || t.pending_prefill_blocks < 0 || t.demand_tokens < 0 ||
         t.demand_requests < 0)) {
      return false;  // totals are never negative
    }
  }
  return true;
}

void RemoteLoad::Add(Load& into, const RemoteTargetLoad& change) {
  into.active_blocks += change.active_blocks;
  into.pending_prefill_blocks += change.pending_prefill_blocks;
  into.demand_tokens += change.demand_tokens;
  into.demand_requests += change.demand_requests;
}

void RemoteLoad::Set(Load& into, const RemoteTargetLoad& total) {
  into.active_blocks = total.active_blocks;
  into.pending_prefill_blocks = total.pending_prefill_blocks;
  into.demand_tokens = total.demand_tokens;
  into.demand_requests = total.demand_requests;
}

RemoteApply RemoteLoad::Apply(const RemoteLoadMessage& message, uint64_t now_ms) {
  if (!Valid(message)) {
    ++rejected_;
    return RemoteApply::kRejected;
  }
  if (message.replica == options_.self_replica) return RemoteApply::kSelf;

  auto it = replicas_.find(message.replica);
  if (it == replicas_.end()) {
    if (replicas_.size() >= options_.max_replicas) {
      ++rejected_;
      return RemoteApply::kRejected;
    }
    it = replicas_.emplace(message.replica, Replica{}).first;
    it->second.epoch = message.epoch;
  }
  Replica& r = it->second;
  if (message.epoch < r.epoch) return RemoteApply::kStale;
  if (message.epoch > r.epoch) {  // restarted
    r = Replica{};
    r.epoch = message.epoch;
  }
  r.last_seen_ms = std::max(r.last_seen_ms, now_ms);

  // The map drops zero entries so an idle replica holds no keys.
  auto prune = [&r]() {
    absl::erase_if(r.targets, [](const auto& entry) { return entry.second.empty(); });
  };

  if (message.kind == RemoteLoadKind::kSnapshot) {
    if (r.synced && message.seq <= r.last_seq) return RemoteApply::kStale;
    const bool next_part = r.synced && r.last_was_snapshot && message.seq == r.last_seq + 1 &&
                           message.ts_ms == r.snapshot_ts_ms;
    if (!next_part) r.targets.clear();
    for (const RemoteTargetLoad& t : message.targets) {
      Set(r.targets[Key(t.worker_id, t.dp_rank)], t);
    }
    prune();
    r.synced = true;
    r.last_seq = message.seq;
    r.last_was_snapshot = true;
    r.snapshot_ts_ms = message.ts_ms;
    return RemoteApply::kApplied;
  }

  if (!r.synced) return RemoteApply::kUnsynced;
  if (message.seq != r.last_seq + 1) {
    if (message.seq <= r.last_seq) return RemoteApply::kStale;  // a duplicate
    r.synced = false;
    ++gaps_;
    return RemoteApply::kGap;
  }
  for (const RemoteTargetLoad& t : message.targets) {
    Add(r.targets[Key(t.worker_id, t.dp_rank)], t);
  }
  prune();
  r.last_seq = message.seq;
  r.last_was_snapshot = false;
  return RemoteApply::kApplied;
}

size_t RemoteLoad::Expire(uint64_t now_ms) {
  size_t dropped = 0;
  for (auto it = replicas_.begin(); it != replicas_.end();) {
    if (now_ms > it->second.last_seen_ms && now_ms - it->second.last_seen_ms > options_.ttl_ms) {
      replicas_.erase(it++);
      ++dropped;
    } else {
      ++it;
    }
  }
  expired_ += dropped;
  return dropped;
}

namespace {
RemoteLoad::Load Clamped(RemoteLoad::Load l) {
  l.active_blocks = std::max<int64_t>(0, l.active_blocks);
  l.pending_prefill_blocks = std::max(0.0, l.pending_prefill_blocks);
  l.demand_tokens = std::max<int64_t>(0, l.demand_tokens);
  l.demand_requests = std::max<int64_t>(0, l.demand_requests);
  return l;
}
void Sum(RemoteLoad::Load& into, const RemoteLoad::Load& l) {
  into.active_blocks += l.active_blocks;
  into.pending_prefill_blocks += l.pending_prefill_blocks;
  into.demand_tokens += l.demand_tokens;
  into.demand_requests += l.demand_requests;
}
}  // namespace

RemoteLoad::Load RemoteLoad::Totals(const TargetKey& key) const {
  Load sum;
  const Key k(key.worker_id, key.dp_rank);
  for (const auto& [id, r] : replicas_) {
    auto it = r.targets.find(k);
    if (it != r.targets.end()) Sum(sum, it->second);
  }
  return Clamped(sum);
}

void RemoteLoad::ForEachTotal(absl::FunctionRef<void(const TargetKey&, const Load&)> fn) const {
  absl::flat_hash_map<Key, Load> sums;
  for (const auto& [id, r] : replicas_) {
    for (const auto& [k, l] : r.targets) Sum(sums[k], l);
  }
  for (const auto& [k, l] : sums) {
    Load c = Clamped(l);
    if (!c.empty()) fn(TargetKey{k.first, k.second}, c);
  }
}

void RemoteLoad::RemoveWorker(const std::string& worker_id) {
  for (auto& [id, r] : replicas_) {
    absl::erase_if(r.targets, [&](const auto& entry) { return entry.first.first == worker_id; });
  }
}

size_t RemoteLoad::synced_replicas() const {
  return static_cast<size_t>(std::count_if(replicas_.begin(), replicas_.end(),
                                           [](const auto& e) { return e.second.synced; }));
}

}  // namespace infera::core
