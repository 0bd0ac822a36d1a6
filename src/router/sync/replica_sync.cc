#include "router/sync/replica_sync.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "events/replica_load_wire.h"
#include "router/metrics/metrics.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

constexpr size_t kMaxReplicaIdBytes = 200;

using Load = core::RemoteLoad::Load;

Load LoadOf(const core::RemoteTargetLoad& t) {
  return {t.active_blocks, t.pending_prefill_blocks, t.demand_tokens, t.demand_requests};
}

bool Same(const Load& a, const Load& b) {
  return a.active_blocks == b.active_blocks &&
         std::abs(a.pending_prefill_blocks - b.pending_prefill_blocks) <= 1e-9 &&
         a.demand_tokens == b.demand_tokens && a.demand_requests == b.demand_requests;
}

}  // namespace

absl::Status ValidateReplicaSyncOptions(const ReplicaSyncOptions& o) {
  if (o.replica_id.empty() || o.replica_id.size() > kMaxReplicaIdBytes) {
    return absl::InvalidArgumentError("--router-replica-id must be 1 to 200 bytes");
  }
  if (o.flush_ms <= 0 || o.flush_ms > 60'000) {
    return absl::InvalidArgumentError("--router-replica-flush-ms must be 1 to 60000");
  }
  if (o.heartbeat_ms <= 0 || o.heartbeat_ms > 3'600'000) {
    return absl::InvalidArgumentError("--router-replica-heartbeat-ms must be 1 to 3600000");
  }
  if (o.ttl_ms <= o.heartbeat_ms || o.ttl_ms > 86'400'000) {
    return absl::InvalidArgumentError(
        "--router-replica-ttl-ms must be above --router-replica-heartbeat-ms (peers would "
        "expire a live replica between its heartbeats) and at most 86400000");
  }
  return absl::OkStatus();
}

std::string DefaultReplicaId(uint64_t seed) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof(host), "router");
  }
  char tail[32];
  std::snprintf(tail, sizeof(tail), ":%d:%08x", static_cast<int>(getpid()),
                static_cast<unsigned>(seed & 0xffffffffu));
  return std::string(host).substr(0, 120) + tail;
}

ReplicaSync::ReplicaSync(ReplicaSyncOptions options, PickPlanner& planner, const WorkerSet& workers,
                         const core::Clock& clock)
    : options_(std::move(options)),
      planner_(planner),
      workers_(workers),
      clock_(clock),
      remote_(core::RemoteLoadOptions{.self_replica = options_.replica_id,
                                      .ttl_ms = static_cast<uint64_t>(options_.ttl_ms)}) {}

ReplicaSync::~ReplicaSync() { Stop(); }

absl::Status ReplicaSync::Start() {
  events::NatsOptions nats;
  nats.url = options_.nats_url;
  nats.on_reconnect = [this] {
    snapshot_due_.store(true);
    {
      base::MutexLock lock(wake_mu_);
      planned_ = true;
    }
    wake_cv_.NotifyOne();
  };
  auto nc = events::NatsConnection::Connect(std::move(nats));
  if (!nc.ok()) return nc.status();
  nc_ = *std::move(nc);
  thread_ = std::thread([this] { Run(); });
  spdlog::info(
      "router replica sync: replica {} epoch {} on {} (flush {} ms, heartbeat {} ms, "
      "ttl {} ms)",
      options_.replica_id, options_.epoch, options_.nats_url, options_.flush_ms,
      options_.heartbeat_ms, options_.ttl_ms);
  return absl::OkStatus();
}

void ReplicaSync::Stop() {
  {
    base::MutexLock lock(wake_mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  wake_cv_.NotifyOne();
  if (thread_.joinable()) thread_.join();
  if (sub_ != nullptr) events::DestroySubscription(sub_, nc_->request_timeout_ms());
  nc_.reset();
}

void ReplicaSync::NotifyPlan() {
  {
    base::MutexLock lock(wake_mu_);
    planned_ = true;
  }
  wake_cv_.NotifyOne();
}

bool ReplicaSync::Subscribe() {
  const std::string subjects(events::kReplicaLoadSubjects);
  natsStatus s =
      natsConnection_Subscribe(&sub_, nc_->conn(), subjects.c_str(), &ReplicaSync::OnMessage, this);
  if (s != NATS_OK) {
    sub_ = nullptr;
    return false;
  }
  // Load is soft state: a slow router drops the oldest messages (a gap: the next
  // snapshot repairs it) rather than buffering without bound.
  natsSubscription_SetPendingLimits(sub_, 10'000, 64 << 20);
  return true;
}

void ReplicaSync::OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  static_cast<ReplicaSync*>(closure)->Receive(msg);
  natsMsg_Destroy(msg);
}

void ReplicaSync::Receive(natsMsg* msg) {
  const auto* data = reinterpret_cast<const uint8_t*>(natsMsg_GetData(msg));
  const std::span<const uint8_t> payload(data, static_cast<size_t>(natsMsg_GetDataLength(msg)));
  auto decoded = events::DecodeReplicaLoad(payload);
  if (!decoded.ok()) {
    in_rejected_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("router replica sync: undecodable message on {}: {}", natsMsg_GetSubject(msg),
                  std::string(decoded.status().message()));
    return;
  }
  core::RemoteApply result;
  {
    base::MutexLock lock(remote_mu_);
    result = remote_.Apply(*decoded, NowMs());
  }
  switch (result) {
    case core::RemoteApply::kSelf:
      return;
    case core::RemoteApply::kRejected:
      in_rejected_.fetch_add(1, std::memory_order_relaxed);
      return;
    case core::RemoteApply::kStale:
    case core::RemoteApply::kUnsynced:
    case core::RemoteApply::kGap:
      in_stale_.fetch_add(1, std::memory_order_relaxed);
      break;
    case core::RemoteApply::kApplied:
      (decoded->kind == core::RemoteLoadKind::kDelta ? in_delta_ : in_snapshot_)
          .fetch_add(1, std::memory_order_relaxed);
      break;
  }
  {
    base::MutexLock lock(wake_mu_);
    received_ = true;
  }
  wake_cv_.NotifyOne();
}

void ReplicaSync::Run() {
  while (true) {
    bool received = false;
    {
      base::MutexLock lock(wake_mu_);
      // Wake on a plan, a message, or after flush_ms (releases are seen by polling).
      wake_cv_.WaitFor(wake_mu_, options_.flush_ms,
                       [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) {
                         return stop_ || planned_ || received_;
                       });
      if (stop_) break;
      const bool planned = planned_;
      received = received_;
      planned_ = false;
      received_ = false;
      plan_unpublished_ = plan_unpublished_ || planned;
      const uint64_t now = NowMs();
      if (planned && now < last_publish_ms_ + options_.flush_ms) {
        // A delta at most every flush_ms: the rest of a burst of picks waits for the
        // window's end and goes out as one message.
        wake_cv_.WaitFor(wake_mu_, static_cast<int64_t>(last_publish_ms_ + options_.flush_ms - now),
                         [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) { return stop_; });
        if (stop_) break;
      }
    }
    if (sub_ == nullptr && nc_->connected()) Subscribe();
    Tick(received);
  }
}

void ReplicaSync::Tick(bool received) {
  const uint64_t now = NowMs();
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  if (nc_->connected()) {
    const bool snapshot =
        snapshot_due_.exchange(false) || now >= last_snapshot_ms_ + options_.heartbeat_ms;
    // Load only comes from plans: with nothing sent and no plan since, it is zero.
    const bool may_delta =
        now >= last_publish_ms_ + options_.flush_ms && (plan_unpublished_ || !sent_.empty());
    if (snapshot || may_delta) {
      plan_unpublished_ = false;
      std::vector<core::RemoteTargetLoad> own = planner_.OwnLoad(*fleet);
      Loads held;
      for (const core::RemoteTargetLoad& t : own) held[{t.worker_id, t.dp_rank}] = LoadOf(t);
      if (snapshot) {
        sent_ = std::move(held);
        Publish(core::RemoteLoadKind::kSnapshot, std::move(own), now);
        last_snapshot_ms_ = now;
      } else {
        // The change since the last message: targets now held, and targets released.
        std::vector<core::RemoteTargetLoad> delta;
        auto add = [&delta](const Key& key, const Load& now_held, const Load& before) {
          if (Same(now_held, before)) return;
          delta.push_back({.worker_id = key.first,
                           .dp_rank = key.second,
                           .active_blocks = now_held.active_blocks - before.active_blocks,
                           .pending_prefill_blocks =
                               now_held.pending_prefill_blocks - before.pending_prefill_blocks,
                           .demand_tokens = now_held.demand_tokens - before.demand_tokens,
                           .demand_requests = now_held.demand_requests - before.demand_requests});
        };
        for (const auto& [key, l] : held) {
          const auto it = sent_.find(key);
          add(key, l, it == sent_.end() ? Load{} : it->second);
        }
        for (const auto& [key, before] : sent_) {
          if (!held.contains(key)) add(key, Load{}, before);
        }
        if (!delta.empty()) {
          sent_ = std::move(held);
          Publish(core::RemoteLoadKind::kDelta, std::move(delta), now);
        }
      }
    }
  } else {
    snapshot_due_.store(true);  // the peers may have expired us meanwhile
  }
  base::MutexLock lock(remote_mu_);
  const bool expired = remote_.Expire(now) > 0;
  // The pick mutex only when the peers' totals (or the fleet they apply to) changed.
  if (!received && !expired && fleet == totals_fleet_) return;
  totals_fleet_ = fleet;
  planner_.SetRemoteLoad(*fleet, [this](const core::TargetKey& key) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // remote_mu_ is held by the caller (Tick): a callback the analysis cannot follow.
    return remote_.Totals(key);
  });
}

void ReplicaSync::Publish(core::RemoteLoadKind kind, std::vector<core::RemoteTargetLoad> targets,
                          uint64_t now_ms) {
  core::RemoteLoadMessage m;
  m.replica = options_.replica_id;
  m.epoch = options_.epoch;
  m.seq = seq_;
  m.kind = kind;
  // Strictly increasing: two snapshots in one millisecond would read as the parts
  // of one split snapshot.
  m.ts_ms = std::max(now_ms, last_ts_ms_ + 1);
  last_ts_ms_ = m.ts_ms;
  m.targets = std::move(targets);
  const std::string subject = events::ReplicaLoadSubject(options_.replica_id);
  const std::vector<std::string> parts = events::EncodeReplicaLoad(m);
  seq_ += parts.size();
  for (const std::string& p : parts) {
    natsStatus s =
        natsConnection_Publish(nc_->conn(), subject.c_str(), p.data(), static_cast<int>(p.size()));
    if (s != NATS_OK) {
      // The peers see a gap and wait for the next snapshot.
      publish_errors_.fetch_add(1, std::memory_order_relaxed);
      snapshot_due_.store(true);
      return;
    }
  }
  (kind == core::RemoteLoadKind::kDelta ? out_delta_ : out_snapshot_)
      .fetch_add(parts.size(), std::memory_order_relaxed);
  last_publish_ms_ = now_ms;
}

}  // namespace infera::router
