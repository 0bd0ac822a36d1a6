#include "router/kv_snapshot_peer_wiring.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/hashing.h"
#include "router/metrics/metrics.h"
#include "spdlog/spdlog.h"

namespace infera::router {

KvSnapshotPeer::KvSnapshotPeer(events::PeerSnapshotIdentity identity, std::string nats_url)
    : identity_(std::move(identity)),
      nats_url_(std::move(nats_url)),
      server_(std::make_shared<events::SnapshotPeerServer>(identity_)) {}

KvSnapshotPeer::~KvSnapshotPeer() { Stop(); }

events::FetchedSnapshot KvSnapshotPeer::JoinIfNeeded() {
  events::PosixSnapshotFs fs;
  const events::SnapshotReader local =
      events::SnapshotReader::Open(fs, identity_.path,
                                   {.hash_scheme = core::kHashSchemeVersion,
                                    .transport = identity_.transport,
                                    .fleet_id = identity_.fleet_id,
                                    .now_unix_ms = events::SnapshotWallMs(),
                                    .max_age_s = identity_.max_age_s});
  if (local.result() == events::LoadResult::kLoaded) {
    spdlog::info("kv-snapshot: {} is usable; no peer join", identity_.path);
    return {};
  }
  events::PeerFetchOutcome out = events::FetchPeerSnapshot(
      identity_, {.nats_url = nats_url_, .sync = false, .stream_build = true});
  fetches_[static_cast<size_t>(out.result)].fetch_add(1);
  if (out.result != events::PeerFetchResult::kOk) {
    spdlog::warn("kv-snapshot: peer join failed: {}: {}; full replay",
                 events::PeerFetchResultName(out.result), out.detail);
    return {};
  }
  spdlog::info(
      "kv-snapshot: fetched {} bytes from peer {:016x} into {} in {} ms (connect + first offer {} "
      "ms, transfer {} ms, check {} ms; fsync after the rename)",
      out.bytes, out.peer, identity_.path, out.took_ms, out.offers_ms, out.transfer_ms,
      out.check_ms);
  sync_ = std::thread([path = identity_.path] {
    const int64_t start = events::SnapshotWallMs();
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const bool ok = fd >= 0 && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    events::PosixSnapshotFs fs;
    if (!ok || !fs.SyncDir(events::SnapshotDir(path)).ok()) {
      spdlog::warn("kv-snapshot: fsync of the fetched {} failed: {}", path, strerror(errno));
      return;
    }
    spdlog::info("kv-snapshot: fetched file synced in {} ms, beside the load",
                 events::SnapshotWallMs() - start);
  });
  return {std::move(out.checked), std::move(out.stream)};
}

absl::Status KvSnapshotPeer::StartServing(natsConnection* nc) { return server_->Start(nc); }

std::function<void()> KvSnapshotPeer::AfterWrite() const {
  return [server = server_] { server->Prepare(); };
}

void KvSnapshotPeer::Stop() {
  server_->Stop();
  if (sync_.joinable()) sync_.join();
}

void KvSnapshotPeer::RenderMetrics(std::string& out) const {
  constexpr std::string_view kFetch = "infera_router_kv_snapshot_peer_fetch_total";
  RenderHeader(out, kFetch, "counter", "Snapshot peer joins by result.");
  for (size_t i = 0; i < events::kPeerFetchResultCount; ++i) {
    out += std::string(kFetch) + "{result=\"" +
           std::string(events::PeerFetchResultName(static_cast<events::PeerFetchResult>(i))) +
           "\"} " + std::to_string(fetches_[i].load()) + "\n";
  }
  constexpr std::string_view kServed = "infera_router_kv_snapshot_peer_served_chunks_total";
  RenderHeader(out, kServed, "counter", "Snapshot chunks this replica served to joining peers.");
  out += std::string(kServed) + " " + std::to_string(server_->served_chunks()) + "\n";
}

std::unique_ptr<KvSnapshotPeer> MakeKvSnapshotPeer(const events::KvSnapshotOptions& snapshot,
                                                   const std::string& nats_url) {
  if (!snapshot.enabled()) return nullptr;
  const uint64_t instance = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  return std::make_unique<KvSnapshotPeer>(
      events::PeerSnapshotIdentity{.path = snapshot.path,
                                   .fleet_id = snapshot.fleet_id,
                                   .transport = events::SnapshotTransport::kZmq,
                                   .max_age_s = snapshot.max_age_s,
                                   .instance = instance},
      nats_url);
}

}  // namespace infera::router
