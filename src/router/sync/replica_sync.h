// ReplicaSync: router replicas sharing their in-flight load over NATS core
// (--router-replica-sync; doc/replica-sync.md).
//
// Every replica publishes its own per-target load (PickPlanner::OwnLoad: active
// blocks, pending prefill blocks, decode demand) on `infera.router.load.<b64url(id)>`
// and subscribes to `infera.router.load.*`; a core::RemoteLoad sums the others' and
// PickPlanner::SetRemoteLoad adds them to the load term of every pick.
//
// One thread. It wakes after each plan (PickPlanner's on_plan hook), on each message
// received, and at least every flush_ms, and then:
//  * publishes a snapshot (absolute totals) at start, after every NATS (re)connect and
//    every heartbeat_ms; otherwise a delta (the change since the last message sent),
//    at most one per flush_ms and none when nothing changed;
//  * expires peers not heard from for ttl_ms (their load stops counting);
//  * sets the peers' totals on the fleet's targets.
// Messages arrive on a libnats thread: decoded and applied to the RemoteLoad under
// mu_, which the pick path never takes. While NATS is down the replica publishes
// nothing (its peers expire it) and routes on local load plus what it had.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "base/mutex.h"
#include "core/clock.h"
#include "core/remote_load.h"
#include "event_wire/nats_connection.h"
#include "router/plan/pick_planner.h"
#include "router/plan/worker_set.h"

namespace infera::router {

struct ReplicaSyncOptions {
  std::string nats_url = "nats://127.0.0.1:4222";  // --nats-server
  std::string replica_id;                          // --router-replica-id (required)
  // A restarted replica with the same id must start a newer epoch (its peers drop the
  // older one's state); main passes wall-clock milliseconds at start.
  uint64_t epoch = 1;
  int64_t flush_ms = 5;         // --router-replica-flush-ms (doc/replica-sync.md "Measured")
  int64_t heartbeat_ms = 1000;  // --router-replica-heartbeat-ms
  int64_t ttl_ms = 3000;        // --router-replica-ttl-ms
};

// InvalidArgument with the message the router exits with: an empty or over-long id,
// a flush or heartbeat <= 0, a TTL not above the heartbeat.
absl::Status ValidateReplicaSyncOptions(const ReplicaSyncOptions& options);

// `<hostname>:<pid>:<8 hex digits of seed>`: the default replica id.
std::string DefaultReplicaId(uint64_t seed);

class ReplicaSync {
 public:
  // REQUIRES: ValidateReplicaSyncOptions(options).ok(); planner, workers and clock
  // outlive the sync.
  ReplicaSync(ReplicaSyncOptions options, PickPlanner& planner, const WorkerSet& workers,
              const core::Clock& clock);
  ~ReplicaSync();
  ReplicaSync(const ReplicaSync&) = delete;
  ReplicaSync& operator=(const ReplicaSync&) = delete;

  // Connects (in the background when no server answers yet), subscribes and starts
  // the thread. An error only for a bad URL or option.
  absl::Status Start();
  // Stops the thread and the subscription; the peers expire this replica.
  void Stop();
  // A plan was made: publish soon (rate-limited to one delta per flush_ms).
  void NotifyPlan();

  const std::string& replica_id() const { return options_.replica_id; }
  // The connection (REQUIRES: Start succeeded; null after Stop): the snapshot peer
  // join serves on it (doc/snapshot.md §9.1).
  events::NatsConnection* connection() const { return nc_.get(); }
  // infera_router_replica_* families (doc/replica-sync.md "Edges").
  void RenderMetrics(std::string& out) const;

 private:
  using Key = std::pair<std::string, uint32_t>;
  using Loads = std::map<Key, core::RemoteLoad::Load>;

  static void OnMessage(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure);
  void Receive(natsMsg* msg);
  void Run();
  bool Subscribe();
  // One turn of the thread: publish (snapshot or delta), expire, and set the peers'
  // totals on the fleet when they may have changed (`received`: a message applied).
  void Tick(bool received);
  void Publish(core::RemoteLoadKind kind, std::vector<core::RemoteTargetLoad> targets,
               uint64_t now_ms);
  uint64_t NowMs() const { return static_cast<uint64_t>(clock_.NowNs() / 1'000'000); }

  const ReplicaSyncOptions options_;
  PickPlanner& planner_;
  const WorkerSet& workers_;
  const core::Clock& clock_;
  std::unique_ptr<events::NatsConnection> nc_;
  natsSubscription* sub_ = nullptr;  // the thread's (and Stop's, after the join)
  std::thread thread_;

  // Wake-ups of the thread.
  base::Mutex wake_mu_;
  base::CondVar wake_cv_;
  bool stop_ ABSL_GUARDED_BY(wake_mu_) = false;
  bool planned_ ABSL_GUARDED_BY(wake_mu_) = false;
  bool received_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::atomic<bool> snapshot_due_{true};  // start, and every (re)connect

  // The thread's own state.
  uint64_t seq_ = 0;  // the next message's
  uint64_t last_ts_ms_ = 0;
  uint64_t last_snapshot_ms_ = 0;
  uint64_t last_publish_ms_ = 0;
  Loads sent_;                     // what the peers believe this replica holds
  bool plan_unpublished_ = false;  // a plan since the last look at the own load
  // The fleet the peers' totals were last set on (held: a new fleet at the old address
  // must not look unchanged).
  std::shared_ptr<const Fleet> totals_fleet_;

  // The peers' load (the libnats callback applies, the thread reads).
  mutable base::Mutex remote_mu_;
  core::RemoteLoad remote_ ABSL_GUARDED_BY(remote_mu_);

  // Counters.
  std::atomic<uint64_t> out_delta_{0}, out_snapshot_{0}, publish_errors_{0};
  std::atomic<uint64_t> in_delta_{0}, in_snapshot_{0}, in_rejected_{0}, in_stale_{0};
};

}  // namespace infera::router
