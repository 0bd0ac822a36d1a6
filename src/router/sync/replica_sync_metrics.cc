// ReplicaSync's series (replica_sync.h, doc/replica-sync.md "Metrics").
#include "router/sync/replica_sync.h"

#include <cstdio>

#include "router/metrics/metrics.h"

namespace infera::router {

void ReplicaSync::RenderMetrics(std::string& out) const {
  size_t peers = 0, synced = 0;
  uint64_t gaps = 0, expired = 0;
  {
    base::MutexLock lock(remote_mu_);
    peers = remote_.replicas();
    synced = remote_.synced_replicas();
    gaps = remote_.gaps();
    expired = remote_.expired();
  }
  auto scalar = [&out](const char* name, const char* type, const char* help, uint64_t value) {
    RenderHeader(out, name, type, help);
    out += std::string(name) + " " + std::to_string(value) + "\n";
  };
  scalar("infera_router_replica_peers", "gauge",
         "Other router replicas whose load counts (heard from within the TTL).", peers);
  scalar("infera_router_replica_synced_peers", "gauge",
         "Peers whose deltas apply (not waiting for a snapshot after a gap).", synced);
  RenderHeader(out, "infera_router_replica_messages_total", "counter",
               "Replica load messages, by direction and kind (in: rejected = undecodable or "
               "malformed, stale = old, out of sequence or waiting for a snapshot).");
  auto row = [&](const char* dir, const char* kind, const std::atomic<uint64_t>& v) {
    out += "infera_router_replica_messages_total{direction=\"" + std::string(dir) + "\",kind=\"" +
           kind + "\"} " + std::to_string(v.load()) + "\n";
  };
  row("out", "delta", out_delta_);
  row("out", "snapshot", out_snapshot_);
  row("in", "delta", in_delta_);
  row("in", "snapshot", in_snapshot_);
  row("in", "rejected", in_rejected_);
  row("in", "stale", in_stale_);
  scalar("infera_router_replica_publish_errors_total", "counter",
         "Replica load messages NATS refused (the next message is a snapshot).",
         publish_errors_.load());
  scalar("infera_router_replica_gaps_total", "counter",
         "Sequence gaps in peers' messages (their load waits for a snapshot).", gaps);
  scalar("infera_router_replica_expired_total", "counter",
         "Peers dropped, with their load, after the TTL without a message.", expired);
}

}  // namespace infera::router
