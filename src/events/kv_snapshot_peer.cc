#include "events/kv_snapshot_peer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/hashing.h"
#include "event_wire/nats_connection.h"
#include "events/kv_snapshot_peer_wire.h"

namespace infera::events {
namespace {

constexpr int64_t kMaxFutureS = 60;

std::span<const uint8_t> Payload(natsMsg* msg) {
  return {reinterpret_cast<const uint8_t*>(natsMsg_GetData(msg)),
          static_cast<size_t>(natsMsg_GetDataLength(msg))};
}

SnapshotExpect ExpectOf(const PeerSnapshotIdentity& id) {
  return {.hash_scheme = core::kHashSchemeVersion,
          .transport = id.transport,
          .fleet_id = id.fleet_id,
          .now_unix_ms = SnapshotWallMs(),
          .max_age_s = id.max_age_s,
          .max_future_s = kMaxFutureS};
}

// Checks the whole file open at `fd` as a start-up load would (§7).
SnapshotReader CheckFd(int fd, const PeerSnapshotIdentity& id) {
  PosixSnapshotFs fs;
  return SnapshotReader::Open(fs, "/proc/self/fd/" + std::to_string(fd), ExpectOf(id));
}

bool PreadAll(int fd, uint8_t* out, size_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t n = pread(fd, out, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace

int64_t SnapshotWallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string_view PeerFetchResultName(PeerFetchResult result) {
  static constexpr std::string_view kNames[] = {
      "ok", "no_offer", "incompatible", "gone", "timeout", "checksum", "io"};
  return kNames[static_cast<size_t>(result)];
}

// ---- serving ----

SnapshotPeerServer::SnapshotPeerServer(PeerSnapshotIdentity identity)
    : identity_(std::move(identity)) {}

SnapshotPeerServer::~SnapshotPeerServer() { Stop(); }

absl::Status SnapshotPeerServer::Start(natsConnection* nc) {
  nc_ = nc;
  const std::string offers = SnapshotOfferSubject(StoredFleetId(identity_.fleet_id));
  natsStatus s =
      natsConnection_Subscribe(&offer_sub_, nc, offers.c_str(), &SnapshotPeerServer::OnOffer, this);
  if (s != NATS_OK) return NatsError("subscribe " + offers, s);
  const std::string chunks = SnapshotChunkSubject(identity_.instance);
  s = natsConnection_Subscribe(&chunk_sub_, nc, chunks.c_str(), &SnapshotPeerServer::OnChunk, this);
  if (s != NATS_OK) return NatsError("subscribe " + chunks, s);
  spdlog::info("kv-snapshot: serving {} to joining peers as {}", identity_.path, chunks);
  return absl::OkStatus();
}

void SnapshotPeerServer::Stop() {
  DestroySubscription(offer_sub_, 2000);
  DestroySubscription(chunk_sub_, 2000);
  base::MutexLock lock(mu_);
  Close();
  if (prepared_.fd >= 0) close(prepared_.fd);
  prepared_ = File{};
}

void SnapshotPeerServer::OnOffer(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  static_cast<SnapshotPeerServer*>(closure)->Offer(msg);
  natsMsg_Destroy(msg);
}

void SnapshotPeerServer::OnChunk(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  static_cast<SnapshotPeerServer*>(closure)->Chunk(msg);
  natsMsg_Destroy(msg);
}

void SnapshotPeerServer::Close() {
  if (file_.fd >= 0) close(file_.fd);
  file_ = File{};
}

SnapshotPeerServer::File SnapshotPeerServer::Check() {
  const int fd = open(identity_.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return {};
  }
  checks_.fetch_add(1, std::memory_order_relaxed);
  SnapshotReader reader = CheckFd(fd, identity_);
  if (reader.result() != LoadResult::kLoaded) {
    spdlog::info("kv-snapshot: not offering {} to a joining peer: {}", identity_.path,
                 reader.detail());
    close(fd);
    return {};
  }
  return {.fd = fd,
          .inode = static_cast<uint64_t>(st.st_ino),
          .created_unix_ms = reader.header().created_unix_ms,
          .size = reader.file_size(),
          .checksum = reader.footer().checksum};
}

void SnapshotPeerServer::Prepare() {
  struct stat st {};
  if (stat(identity_.path.c_str(), &st) != 0) return;
  {
    base::MutexLock lock(mu_);
    const auto ino = static_cast<uint64_t>(st.st_ino);
    if ((file_.fd >= 0 && file_.inode == ino) || (prepared_.fd >= 0 && prepared_.inode == ino)) {
      return;
    }
  }
  // The check (the checksum over the whole file) runs with no lock held: offers and
  // chunks of the file being served go on meanwhile.
  const File checked = Check();
  if (checked.fd < 0) return;
  base::MutexLock lock(mu_);
  if (prepared_.fd >= 0) close(prepared_.fd);
  prepared_ = checked;
}

bool SnapshotPeerServer::Refresh() {
  struct stat st {};
  if (stat(identity_.path.c_str(), &st) != 0) {
    Close();
    return false;
  }
  const auto ino = static_cast<uint64_t>(st.st_ino);
  if (prepared_.fd >= 0) {
    if (prepared_.inode == ino) {  // checked after its write: moved on to at once
      Close();
      file_ = prepared_;
    } else {
      close(prepared_.fd);  // a newer file replaced it since
    }
    prepared_ = File{};
  }
  if (file_.fd >= 0 && file_.inode == ino) {
    const int64_t age_ms = SnapshotWallMs() - file_.created_unix_ms;
    return age_ms <= identity_.max_age_s * 1000;
  }
  Close();
  file_ = Check();
  return file_.fd >= 0;
}

void SnapshotPeerServer::Offer(natsMsg* msg) {
  const char* reply = natsMsg_GetReply(msg);
  auto request = DecodeOfferRequest(Payload(msg));
  if (reply == nullptr || !request.ok()) return;
  if (request->fleet != StoredFleetId(identity_.fleet_id) ||
      request->transport != static_cast<uint8_t>(identity_.transport) ||
      request->hash_scheme != core::kHashSchemeVersion || request->joiner == identity_.instance) {
    return;
  }
  SnapshotOffer offer;
  {
    base::MutexLock lock(mu_);
    if (!Refresh()) return;
    offer = {.instance = identity_.instance,
             .created_unix_ms = file_.created_unix_ms,
             .size = file_.size,
             .chunk_size = kSnapshotChunkBytes,
             .chunks = (file_.size + kSnapshotChunkBytes - 1) / kSnapshotChunkBytes,
             .checksum = file_.checksum};
  }
  const std::string body = EncodeOffer(offer);
  natsConnection_Publish(nc_, reply, body.data(), static_cast<int>(body.size()));
  offers_.fetch_add(1, std::memory_order_relaxed);
}

void SnapshotPeerServer::Chunk(natsMsg* msg) {
  const char* reply = natsMsg_GetReply(msg);
  auto request = DecodeChunkRequest(Payload(msg));
  if (reply == nullptr || !request.ok()) return;
  // One buffer per libnats thread, kept: a fresh 512 KiB per chunk was, with the
  // router's decommit delay of 0 (apps/infera-router/allocator_options.cc), given back
  // to the OS and faulted in again for every chunk served.
  thread_local std::vector<uint8_t> bytes;
  bytes.clear();
  {
    // The held descriptor keeps the offered file readable after the next periodic
    // write renames a new one over the path: a fetch in progress is not cut short.
    base::MutexLock lock(mu_);
    const bool same = file_.fd >= 0 && file_.created_unix_ms == request->created_unix_ms;
    const uint64_t offset = request->index * kSnapshotChunkBytes;
    if (same && request->index < (file_.size + kSnapshotChunkBytes - 1) / kSnapshotChunkBytes) {
      bytes.resize(std::min<uint64_t>(kSnapshotChunkBytes, file_.size - offset));
      if (!PreadAll(file_.fd, bytes.data(), bytes.size(), offset)) bytes.clear();
    }
  }
  if (bytes.empty()) {  // the file changed, or cannot be read: the joiner starts over
    natsMsg* gone = nullptr;
    if (natsMsg_Create(&gone, reply, nullptr, nullptr, 0) != NATS_OK) return;
    natsMsgHeader_Set(gone, std::string(kSnapshotErrorHeader).c_str(), "gone");
    natsConnection_PublishMsg(nc_, gone);
    natsMsg_Destroy(gone);
    return;
  }
  natsConnection_Publish(nc_, reply, bytes.data(), static_cast<int>(bytes.size()));
  served_chunks_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace infera::events
