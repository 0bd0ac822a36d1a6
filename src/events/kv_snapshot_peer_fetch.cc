// FetchPeerSnapshot (kv_snapshot_peer.h): the joining side of doc/snapshot.md §9.1.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "core/hashing.h"
#include "events/kv_snapshot_peer.h"
#include "events/kv_snapshot_peer_wire.h"

namespace infera::events {
namespace {

constexpr int64_t kMaxFutureMs = 60'000;

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::span<const uint8_t> Body(natsMsg* msg) {
  return {reinterpret_cast<const uint8_t*>(natsMsg_GetData(msg)),
          static_cast<size_t>(natsMsg_GetDataLength(msg))};
}

std::string NatsText(natsStatus s) { return natsStatus_GetText(s); }

// A failed step of the fetch.
struct Failure {
  PeerFetchResult result;
  std::string detail;
};

// An inbox and a synchronous subscription on it (or on `inbox.*`), destroyed together.
class Inbox {
 public:
  Inbox(natsConnection* nc, bool wildcard) {
    natsInbox* inbox = nullptr;
    if (natsInbox_Create(&inbox) != NATS_OK) return;
    name_ = inbox;
    natsInbox_Destroy(inbox);
    const std::string subject = wildcard ? name_ + ".*" : name_;
    if (natsConnection_SubscribeSync(&sub_, nc, subject.c_str()) != NATS_OK) sub_ = nullptr;
  }
  ~Inbox() {
    if (sub_ != nullptr) {
      natsSubscription_Unsubscribe(sub_);
      natsSubscription_Destroy(sub_);
    }
  }
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;
  bool ok() const { return sub_ != nullptr; }
  const std::string& name() const { return name_; }
  // The next message within timeout_ms (owned by the caller), or null.
  natsMsg* Next(int64_t timeout_ms, natsStatus& s) {
    natsMsg* msg = nullptr;
    s = natsSubscription_NextMsg(&msg, sub_, std::max<int64_t>(timeout_ms, 1));
    return s == NATS_OK ? msg : nullptr;
  }

 private:
  std::string name_;
  natsSubscription* sub_ = nullptr;
};

struct MsgGuard {
  natsMsg* msg;
  ~MsgGuard() { natsMsg_Destroy(msg); }
};

// Offers received within offer_wait_ms that this joiner accepts, newest first.
std::vector<SnapshotOffer> CollectOffers(natsConnection* nc, const PeerSnapshotIdentity& id,
                                         const PeerFetchOptions& options, size_t& received) {
  std::vector<SnapshotOffer> offers;
  Inbox inbox(nc, false);
  if (!inbox.ok()) return offers;
  const std::string body = EncodeOfferRequest({.fleet = StoredFleetId(id.fleet_id),
                                               .transport = static_cast<uint8_t>(id.transport),
                                               .hash_scheme = core::kHashSchemeVersion,
                                               .joiner = id.instance});
  const std::string subject = SnapshotOfferSubject(StoredFleetId(id.fleet_id));
  if (natsConnection_PublishRequest(nc, subject.c_str(), inbox.name().c_str(), body.data(),
                                    static_cast<int>(body.size())) != NATS_OK) {
    return offers;
  }
  const int64_t deadline = SteadyMs() + options.offer_wait_ms;
  for (int64_t left = options.offer_wait_ms; left > 0; left = deadline - SteadyMs()) {
    natsStatus s;
    natsMsg* msg = inbox.Next(left, s);
    if (msg == nullptr) break;
    MsgGuard guard{msg};
    if (natsMsg_IsNoResponders(msg)) break;  // nobody subscribes: no replica serves
    ++received;
    auto offer = DecodeOffer(Body(msg));
    if (!offer.ok() || !OfferShapeValid(*offer) || offer->instance == id.instance) continue;
    const int64_t age_ms = SnapshotWallMs() - offer->created_unix_ms;
    if (age_ms > id.max_age_s * 1000 || age_ms < -kMaxFutureMs) continue;
    offers.push_back(*offer);
  }
  std::sort(offers.begin(), offers.end(), [](const SnapshotOffer& a, const SnapshotOffer& b) {
    if (a.created_unix_ms != b.created_unix_ms) return a.created_unix_ms > b.created_unix_ms;
    return a.instance < b.instance;
  });
  return offers;
}

// The chunks of one offer into `fd` at their offsets.
std::optional<Failure> FetchChunks(natsConnection* nc, const SnapshotOffer& offer, int fd,
                                   const PeerFetchOptions& options) {
  Inbox inbox(nc, true);
  if (!inbox.ok()) return Failure{PeerFetchResult::kTimeout, "no inbox"};
  const std::string subject = SnapshotChunkSubject(offer.instance);
  struct Pending {
    int64_t deadline_ms = 0;
    int attempts = 0;
  };
  std::map<uint64_t, Pending> pending;
  auto send = [&](uint64_t index) {
    const std::string body =
        EncodeChunkRequest({.created_unix_ms = offer.created_unix_ms, .index = index});
    const std::string reply = inbox.name() + "." + std::to_string(index);
    natsConnection_PublishRequest(nc, subject.c_str(), reply.c_str(), body.data(),
                                  static_cast<int>(body.size()));
    Pending& p = pending[index];
    p.deadline_ms = SteadyMs() + options.chunk_timeout_ms;
    ++p.attempts;
  };
  uint64_t next = 0, done = 0;
  while (done < offer.chunks) {
    while (pending.size() < static_cast<size_t>(options.in_flight) && next < offer.chunks) {
      send(next++);
    }
    int64_t earliest = INT64_MAX;
    for (const auto& [index, p] : pending) earliest = std::min(earliest, p.deadline_ms);
    natsStatus s;
    natsMsg* msg = inbox.Next(earliest - SteadyMs(), s);
    if (msg == nullptr) {
      if (s != NATS_TIMEOUT) return Failure{PeerFetchResult::kTimeout, NatsText(s)};
      const int64_t now = SteadyMs();
      for (auto& [index, p] : pending) {
        if (p.deadline_ms > now) continue;
        if (p.attempts > options.chunk_retries) {
          return Failure{PeerFetchResult::kTimeout, "chunk " + std::to_string(index) +
                                                        " unanswered after " +
                                                        std::to_string(p.attempts) + " tries"};
        }
        send(index);
      }
      continue;
    }
    MsgGuard guard{msg};
    const std::string_view reply = natsMsg_GetSubject(msg);
    const uint64_t index = std::strtoull(reply.substr(inbox.name().size() + 1).data(), nullptr, 10);
    if (!pending.contains(index)) continue;  // a late answer to a retried request
    const char* error = nullptr;
    if (natsMsg_IsNoResponders(msg) ||
        natsMsgHeader_Get(msg, std::string(kSnapshotErrorHeader).c_str(), &error) == NATS_OK) {
      return Failure{PeerFetchResult::kGone, "the peer's file changed or the peer left"};
    }
    const uint64_t offset = index * offer.chunk_size;
    const uint64_t expected = std::min(offer.chunk_size, offer.size - offset);
    const std::span<const uint8_t> bytes = Body(msg);
    if (bytes.size() != expected) {
      return Failure{PeerFetchResult::kChecksum,
                     "chunk " + std::to_string(index) + ": " + std::to_string(bytes.size()) +
                         " bytes, expected " + std::to_string(expected)};
    }
    size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = pwrite(fd, bytes.data() + written, bytes.size() - written,
                               static_cast<off_t>(offset + written));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Failure{PeerFetchResult::kIo, std::string("write: ") + strerror(errno)};
      written += static_cast<size_t>(n);
    }
    pending.erase(index);
    ++done;
  }
  return std::nullopt;
}

// One offer: chunks into the temp file, fsync, every load check, rename to the path.
std::optional<Failure> FetchOffer(natsConnection* nc, const SnapshotOffer& offer,
                                  const PeerSnapshotIdentity& id, const PeerFetchOptions& options,
                                  PeerFetchOutcome& times) {
  PosixSnapshotFs fs;
  const std::string temp = id.path + ".tmp." + std::to_string(getpid());
  (void)fs.Unlink(temp);
  const int fd = open(temp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return Failure{PeerFetchResult::kIo, "open " + temp + ": " + strerror(errno)};
  int64_t t = SteadyMs();
  std::optional<Failure> failure = FetchChunks(nc, offer, fd, options);
  times.transfer_ms = SteadyMs() - t;
  t = SteadyMs();
  if (!failure && fsync(fd) != 0) {
    failure = Failure{PeerFetchResult::kIo, std::string("fsync: ") + strerror(errno)};
  }
  close(fd);
  times.sync_ms = SteadyMs() - t;
  t = SteadyMs();
  if (!failure) {
    SnapshotReader reader = SnapshotReader::Open(fs, temp,
                                                 {.hash_scheme = core::kHashSchemeVersion,
                                                  .transport = id.transport,
                                                  .fleet_id = id.fleet_id,
                                                  .now_unix_ms = SnapshotWallMs(),
                                                  .max_age_s = id.max_age_s});
    if (reader.result() == LoadResult::kRefusedChecksum ||
        reader.result() == LoadResult::kRefusedCorrupt) {
      failure = Failure{PeerFetchResult::kChecksum, reader.detail()};
    } else if (reader.result() != LoadResult::kLoaded) {
      failure = Failure{PeerFetchResult::kIncompatible, reader.detail()};
    } else if (reader.footer().checksum != offer.checksum) {
      failure = Failure{PeerFetchResult::kChecksum, "not the offered file's checksum"};
    }
  }
  times.check_ms = SteadyMs() - t;
  if (!failure) {
    if (absl::Status s = fs.Rename(temp, id.path); !s.ok()) {
      failure = Failure{PeerFetchResult::kIo, std::string(s.message())};
    } else {
      (void)fs.SyncDir(SnapshotDir(id.path));
      return std::nullopt;
    }
  }
  (void)fs.Unlink(temp);
  return failure;
}

}  // namespace

PeerFetchOutcome FetchPeerSnapshot(const PeerSnapshotIdentity& id,
                                   const PeerFetchOptions& options) {
  const int64_t start = SteadyMs();
  PeerFetchOutcome out;
  natsOptions* nopts = nullptr;
  natsConnection* nc = nullptr;
  natsStatus s = natsOptions_Create(&nopts);
  if (s == NATS_OK) s = natsOptions_SetURL(nopts, options.nats_url.c_str());
  if (s == NATS_OK) s = natsOptions_SetTimeout(nopts, options.connect_timeout_ms);
  if (s == NATS_OK) s = natsOptions_SetAllowReconnect(nopts, false);
  if (s == NATS_OK) s = natsConnection_Connect(&nc, nopts);
  natsOptions_Destroy(nopts);
  if (s != NATS_OK) {
    out.detail = "NATS " + options.nats_url + ": " + NatsText(s);
  } else {
    size_t received = 0;
    const std::vector<SnapshotOffer> offers = CollectOffers(nc, id, options, received);
    out.offers_ms = SteadyMs() - start;
    out.result = received == 0 ? PeerFetchResult::kNoOffer : PeerFetchResult::kIncompatible;
    out.detail = received == 0 ? "no offer in " + std::to_string(options.offer_wait_ms) + " ms"
                               : "no compatible offer of " + std::to_string(received);
    for (size_t i = 0; i < offers.size() && i < static_cast<size_t>(options.max_offers); ++i) {
      std::optional<Failure> failure = FetchOffer(nc, offers[i], id, options, out);
      if (!failure) {
        out.result = PeerFetchResult::kOk;
        out.detail.clear();
        out.peer = offers[i].instance;
        out.bytes = offers[i].size;
        break;
      }
      out.result = failure->result;
      out.detail = failure->detail;
    }
    natsConnection_Destroy(nc);
  }
  out.took_ms = SteadyMs() - start;
  return out;
}

}  // namespace infera::events
