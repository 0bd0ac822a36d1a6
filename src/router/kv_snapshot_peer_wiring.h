// KvSnapshotPeer: the router's side of the snapshot peer join (doc/snapshot.md §9.1).
//
// With --kv-snapshot-path and --router-replica-sync, every replica serves its last
// written snapshot file to joining replicas on the replica-sync connection; with
// --kv-snapshot-peer-join as well, a replica whose local file is absent or would be
// refused fetches the newest compatible peer's file into its path before the start-up
// load (which takes the file as the fetch checked it, and verifies the views). The
// fetched file is fsynced after its rename, beside the start-up load.
//
// Thread-safety: JoinIfNeeded, StartServing and Stop from the router's start and
// shutdown; RenderMetrics from any thread.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "events/kv_snapshot_peer.h"

namespace infera::router {

class KvSnapshotPeer {
 public:
  KvSnapshotPeer(events::PeerSnapshotIdentity identity, std::string nats_url);
  ~KvSnapshotPeer();
  KvSnapshotPeer(const KvSnapshotPeer&) = delete;
  KvSnapshotPeer& operator=(const KvSnapshotPeer&) = delete;

  // Before the start-up load: when the local file is absent or would be refused,
  // fetches a peer's into the path; a failure logs `kv-snapshot: peer join failed:
  // <reason>; full replay` and leaves the path as it was. Returns the fetched file as
  // the fetch checked it and the staging build that ran during the transfer (for
  // PrepareKvSnapshots), nothing without a fetched file.
  events::FetchedSnapshot JoinIfNeeded();
  // Answers offers and serves chunks on `nc` (the replica-sync connection, which must
  // outlive Stop).
  absl::Status StartServing(natsConnection* nc);
  // For KvSnapshotStats::after_write: checks each file written for the next offer (it
  // holds the server, so it may outlive this object).
  std::function<void()> AfterWrite() const;
  void Stop();
  // infera_router_kv_snapshot_peer_fetch_total, _peer_served_chunks_total.
  void RenderMetrics(std::string& out) const;

 private:
  const events::PeerSnapshotIdentity identity_;
  const std::string nats_url_;
  std::atomic<uint64_t> fetches_[events::kPeerFetchResultCount] = {};
  std::shared_ptr<events::SnapshotPeerServer> server_;  // serving from StartServing
  std::thread sync_;  // fsyncs a fetched file after its rename (joined by Stop)
};

// With --kv-snapshot-path (ZMQ events) and --router-replica-sync, whose server is
// `nats_url`; null without a snapshot path.
std::unique_ptr<KvSnapshotPeer> MakeKvSnapshotPeer(const events::KvSnapshotOptions& snapshot,
                                                   const std::string& nats_url);

}  // namespace infera::router
