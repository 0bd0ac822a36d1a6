// FetchPeerSnapshot (kv_snapshot_peer.h): the joining side of doc/snapshot.md §9.1.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/hashing.h"
#include "events/kv_snapshot_peer.h"
#include "events/kv_snapshot_peer_wire.h"
#include "events/kv_snapshot_stream.h"

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

// A failed step of the fetch; `switched`: not a failure, a newer offer arrived within
// the offer window while this one was being fetched.
struct Failure {
  PeerFetchResult result;
  std::string detail;
  bool switched = false;
};

struct MsgGuard {
  natsMsg* msg;
  ~MsgGuard() { natsMsg_Destroy(msg); }
};

// Newest first (created_unix_ms, then the smaller instance).
bool Better(const SnapshotOffer& a, const SnapshotOffer& b) {
  if (a.created_unix_ms != b.created_unix_ms) return a.created_unix_ms > b.created_unix_ms;
  return a.instance < b.instance;
}

// One fetch. A wildcard inbox receives the offers (<inbox>.offer) and the chunks of
// every transfer (<inbox>.<transfer>.<index>), so an offer that arrives within the
// offer window while the first one is being fetched is seen: the fetch starts with the
// first acceptable offer instead of waiting out the window, and moves to a newer one
// if it arrives in time (never later than waiting the window out would have started).
class Fetch {
 public:
  Fetch(natsConnection* nc, const PeerSnapshotIdentity& id, const PeerFetchOptions& options)
      : nc_(nc), id_(id), options_(options) {
    natsInbox* inbox = nullptr;
    if (natsInbox_Create(&inbox) != NATS_OK) return;
    inbox_ = inbox;
    natsInbox_Destroy(inbox);
    const std::string subject = inbox_ + ".>";
    if (natsConnection_SubscribeSync(&sub_, nc, subject.c_str()) != NATS_OK) sub_ = nullptr;
  }
  ~Fetch() {
    if (sub_ != nullptr) {
      natsSubscription_Unsubscribe(sub_);
      natsSubscription_Destroy(sub_);
    }
  }
  Fetch(const Fetch&) = delete;
  Fetch& operator=(const Fetch&) = delete;

  // Publishes the offer request; false when it cannot be sent.
  bool Ask() {
    if (sub_ == nullptr) return false;
    const std::string body = EncodeOfferRequest({.fleet = StoredFleetId(id_.fleet_id),
                                                 .transport = static_cast<uint8_t>(id_.transport),
                                                 .hash_scheme = core::kHashSchemeVersion,
                                                 .joiner = id_.instance});
    const std::string subject = SnapshotOfferSubject(StoredFleetId(id_.fleet_id));
    const std::string reply = inbox_ + ".offer";
    window_end_ms_ = SteadyMs() + options_.offer_wait_ms;
    return natsConnection_PublishRequest(nc_, subject.c_str(), reply.c_str(), body.data(),
                                         static_cast<int>(body.size())) == NATS_OK;
  }

  // Waits for the first acceptable offer, until the window ends or no replica can
  // answer. Chunk answers cannot arrive yet.
  void WaitFirst() {
    while (offers_.empty() && !no_responders_) {
      const int64_t left = window_end_ms_ - SteadyMs();
      if (left <= 0) return;
      natsMsg* msg = nullptr;
      if (natsSubscription_NextMsg(&msg, sub_, left) != NATS_OK) return;
      MsgGuard guard{msg};
      TakeOffer(msg);
    }
  }

  // The best offer not yet tried (removed from the list).
  std::optional<SnapshotOffer> Next() {
    if (offers_.empty()) return std::nullopt;
    SnapshotOffer best = offers_.front();
    offers_.erase(offers_.begin());
    return best;
  }
  void PutBack(const SnapshotOffer& offer) { Insert(offer); }

  size_t received() const { return received_; }
  bool sync() const { return options_.sync; }
  bool stream_build() const { return options_.stream_build; }

  // The chunks of `offer` into `fd` at their offsets: the footer's first, then the rest
  // in order; `stream` (may be null) is told the prefix written after every chunk.
  std::optional<Failure> Chunks(const SnapshotOffer& offer, int fd, SnapshotStreamBuild* stream);

 private:
  void Insert(const SnapshotOffer& offer) {
    offers_.insert(std::upper_bound(offers_.begin(), offers_.end(), offer, Better), offer);
  }
  // An answer to the offer request: kept when it arrived within the window and this
  // joiner accepts it.
  void TakeOffer(natsMsg* msg) {
    if (natsMsg_IsNoResponders(msg)) {  // nobody subscribes: no replica serves
      no_responders_ = true;
      return;
    }
    if (SteadyMs() > window_end_ms_) return;
    ++received_;
    auto offer = DecodeOffer(Body(msg));
    if (!offer.ok() || !OfferShapeValid(*offer) || offer->instance == id_.instance) return;
    const int64_t age_ms = SnapshotWallMs() - offer->created_unix_ms;
    if (age_ms > id_.max_age_s * 1000 || age_ms < -kMaxFutureMs) return;
    Insert(*offer);
  }

  natsConnection* const nc_;
  const PeerSnapshotIdentity& id_;
  const PeerFetchOptions& options_;
  std::string inbox_;
  natsSubscription* sub_ = nullptr;
  int64_t window_end_ms_ = 0;
  size_t received_ = 0;
  bool no_responders_ = false;
  uint64_t transfer_ = 0;              // numbers the transfers' reply subjects
  std::vector<SnapshotOffer> offers_;  // not yet tried, best first
};

std::optional<Failure> Fetch::Chunks(const SnapshotOffer& offer, int fd,
                                     SnapshotStreamBuild* stream) {
  const std::string subject = SnapshotChunkSubject(offer.instance);
  const std::string prefix = inbox_ + "." + std::to_string(++transfer_) + ".";
  struct Pending {
    int64_t deadline_ms = 0;
    int attempts = 0;
  };
  std::map<uint64_t, Pending> pending;
  auto send = [&](uint64_t index) {
    const std::string body =
        EncodeChunkRequest({.created_unix_ms = offer.created_unix_ms, .index = index});
    const std::string reply = prefix + std::to_string(index);
    natsConnection_PublishRequest(nc_, subject.c_str(), reply.c_str(), body.data(),
                                  static_cast<int>(body.size()));
    Pending& p = pending[index];
    p.deadline_ms = SteadyMs() + options_.chunk_timeout_ms;
    ++p.attempts;
  };
  // The footer's chunks (the last, or the last two when the footer straddles them) go
  // first: the streamed build reserves its index from the footer before any record.
  const uint64_t footer_chunk = (offer.size - kSnapshotFooterBytes) / offer.chunk_size;
  auto nth = [&](uint64_t k) {  // the k-th chunk to request
    const uint64_t tail = offer.chunks - footer_chunk;
    return k < tail ? footer_chunk + k : k - tail;
  };
  std::vector<bool> in(offer.chunks, false);
  uint64_t next = 0, done = 0, front = 0, footer_in = 0;  // front: chunks in without a hole
  while (done < offer.chunks) {
    while (pending.size() < static_cast<size_t>(options_.in_flight) && next < offer.chunks) {
      send(nth(next++));
    }
    int64_t earliest = INT64_MAX;
    for (const auto& [index, p] : pending) earliest = std::min(earliest, p.deadline_ms);
    natsMsg* msg = nullptr;
    const natsStatus s =
        natsSubscription_NextMsg(&msg, sub_, std::max<int64_t>(earliest - SteadyMs(), 1));
    if (s == NATS_TIMEOUT) {
      const int64_t now = SteadyMs();
      for (auto& [index, p] : pending) {
        if (p.deadline_ms > now) continue;
        if (p.attempts > options_.chunk_retries) {
          return Failure{PeerFetchResult::kTimeout, "chunk " + std::to_string(index) +
                                                        " unanswered after " +
                                                        std::to_string(p.attempts) + " tries"};
        }
        send(index);
      }
      continue;
    }
    if (s != NATS_OK) return Failure{PeerFetchResult::kTimeout, NatsText(s)};
    MsgGuard guard{msg};
    const std::string_view reply = natsMsg_GetSubject(msg);
    if (reply == inbox_ + ".offer") {
      TakeOffer(msg);
      if (!offers_.empty() && Better(offers_.front(), offer)) {
        return Failure{PeerFetchResult::kOk, "a newer offer", /*switched=*/true};
      }
      continue;
    }
    if (!reply.starts_with(prefix)) continue;  // an earlier transfer's late answer
    const uint64_t index = std::strtoull(reply.substr(prefix.size()).data(), nullptr, 10);
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
    in[index] = true;
    if (index >= footer_chunk) ++footer_in;
    while (front < offer.chunks && in[front]) ++front;
    if (stream != nullptr) {
      stream->Received(std::min(front * offer.chunk_size, offer.size),
                       footer_in == offer.chunks - footer_chunk);
    }
  }
  return std::nullopt;
}

// One offer: chunks into the temp file, fsync, every load check, rename to the path
// (the checked reader into times.checked).
std::optional<Failure> FetchOffer(Fetch& fetch, const SnapshotOffer& offer,
                                  const PeerSnapshotIdentity& id, PeerFetchOutcome& times) {
  PosixSnapshotFs fs;
  const std::string temp = id.path + ".tmp." + std::to_string(getpid());
  (void)fs.Unlink(temp);
  const int fd = open(temp.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Failure{PeerFetchResult::kIo, "open " + temp + ": " + strerror(errno)};
  // The streamed build maps the whole file: it is sized first (the chunks fill it).
  std::unique_ptr<SnapshotStreamBuild> stream;
  if (fetch.stream_build() && ftruncate(fd, static_cast<off_t>(offer.size)) == 0) {
    stream = std::make_unique<SnapshotStreamBuild>(fd, offer.size);
  }
  int64_t t = SteadyMs();
  std::optional<Failure> failure = fetch.Chunks(offer, fd, stream.get());
  times.transfer_ms = SteadyMs() - t;
  t = SteadyMs();
  if (failure && failure->switched) {
    close(fd);
    (void)fs.Unlink(temp);
    return failure;
  }
  if (!failure && fetch.sync() && fsync(fd) != 0) {
    failure = Failure{PeerFetchResult::kIo, std::string("fsync: ") + strerror(errno)};
  }
  close(fd);
  times.sync_ms = SteadyMs() - t;
  t = SteadyMs();
  std::optional<SnapshotReader> checked;
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
    } else {
      checked = std::move(reader);
    }
  }
  times.check_ms = SteadyMs() - t;
  if (!failure) {
    if (absl::Status s = fs.Rename(temp, id.path); !s.ok()) {
      failure = Failure{PeerFetchResult::kIo, std::string(s.message())};
    } else {
      if (fetch.sync()) (void)fs.SyncDir(SnapshotDir(id.path));
      times.checked = std::move(checked);  // the mapping outlives the rename
      times.stream = std::move(stream);    // and so does the build's
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
    Fetch fetch(nc, id, options);
    if (fetch.Ask()) fetch.WaitFirst();
    out.offers_ms = SteadyMs() - start;
    out.result = fetch.received() == 0 ? PeerFetchResult::kNoOffer : PeerFetchResult::kIncompatible;
    out.detail = fetch.received() == 0
                     ? "no offer in " + std::to_string(options.offer_wait_ms) + " ms"
                     : "no compatible offer of " + std::to_string(fetch.received());
    for (int failed = 0; failed < options.max_offers;) {
      const std::optional<SnapshotOffer> offer = fetch.Next();
      if (!offer) break;
      std::optional<Failure> failure = FetchOffer(fetch, *offer, id, out);
      if (!failure) {
        out.result = PeerFetchResult::kOk;
        out.detail.clear();
        out.peer = offer->instance;
        out.bytes = offer->size;
        break;
      }
      if (failure->switched) {  // the newer offer is next; this one stays a fallback
        fetch.PutBack(*offer);
        continue;
      }
      ++failed;
      out.result = failure->result;
      out.detail = failure->detail;
    }
    natsConnection_Destroy(nc);
  }
  out.took_ms = SteadyMs() - start;
  return out;
}

}  // namespace infera::events
