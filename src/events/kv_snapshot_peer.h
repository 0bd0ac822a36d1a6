// The snapshot peer join (doc/snapshot.md §9.1): a replica serves its last written
// snapshot file to joining replicas over NATS core, and a joining replica fetches the
// newest compatible one into its own snapshot path before the ordinary start-up load.
//
// SnapshotPeerServer answers offers on infera.router.snapshot.offer.<fleet> when its
// file passes every check the replica itself would make at load (§7), and serves
// 512 KiB chunks of that file with pread on infera.router.snapshot.chunk.<instance>
// from the descriptor it checked (so a periodic write renaming a new file over the
// path does not cut a fetch short); a chunk of a file it no longer holds (another
// created_unix_ms: a later offer moved it on to a newer file) is answered "gone". It
// takes no index lock.
//
// FetchPeerSnapshot asks for offers and starts with the first compatible one; an offer
// that arrives within offer_wait_ms of the request and is newer (created_unix_ms, then
// the smaller instance) replaces it (so the newest offer of the window is taken, never
// later than waiting the window out would have started it). It keeps `in_flight` chunk
// requests outstanding,
// retries a chunk `chunk_retries` times after chunk_timeout_ms, writes every chunk at
// its offset into `path.tmp.<pid>`, fsyncs it (unless options.sync is false), checks
// it as a file loaded at start (every check of §7, the checksum over the bytes
// received), and renames it to `path`; the outcome keeps the checked reader.
// A failed offer (gone, timeout, bad bytes) moves on to the next, at most max_offers.
//
// Thread-safety: the server's callbacks run on libnats threads; its public methods
// from one thread. FetchPeerSnapshot blocks its caller.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "base/mutex.h"
#include "events/kv_snapshot.h"
#include "events/kv_snapshot_stream.h"

namespace infera::events {

// What a snapshot must match, on both sides of a join.
struct PeerSnapshotIdentity {
  std::string path;      // --kv-snapshot-path
  std::string fleet_id;  // as configured (compared in its stored form)
  SnapshotTransport transport = SnapshotTransport::kZmq;
  int64_t max_age_s = 900;
  uint64_t instance = 0;  // this replica's (random per process)
};

class SnapshotPeerServer {
 public:
  explicit SnapshotPeerServer(PeerSnapshotIdentity identity);
  ~SnapshotPeerServer();
  SnapshotPeerServer(const SnapshotPeerServer&) = delete;
  SnapshotPeerServer& operator=(const SnapshotPeerServer&) = delete;

  // Subscribes on `nc` (which must outlive Stop). An error only when libnats refuses.
  absl::Status Start(natsConnection* nc);
  // Drains the subscriptions (their last callback has returned) and closes the file.
  void Stop();
  // Checks the path's current file (every §7 check) now, on the caller's thread, off the
  // offer path, unless it is the file already checked: the next offer then only moves
  // on to it (an immediate answer) instead of checking 260 MB first (0.16-0.35 s, more
  // under load: a joiner waits 500 ms for offers). Called after each snapshot write
  // (KvSnapshotStats::after_write); any time, from any one thread, before or after Start.
  void Prepare();

  uint64_t served_chunks() const { return served_chunks_.load(std::memory_order_relaxed); }
  uint64_t offers() const { return offers_.load(std::memory_order_relaxed); }
  // Full checks of a file (by Prepare or at an offer), for tests.
  uint64_t checks() const { return checks_.load(std::memory_order_relaxed); }

 private:
  struct File {
    int fd = -1;
    uint64_t inode = 0;
    int64_t created_unix_ms = 0;
    uint64_t size = 0;
    uint64_t checksum = 0;
  };
  static void OnOffer(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure);
  static void OnChunk(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure);
  void Offer(natsMsg* msg);
  void Chunk(natsMsg* msg);
  // Opens and checks the path's current file (§7), or moves on to the one Prepare
  // checked; false when it is not usable.
  bool Refresh() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens the path's file and checks it (no lock: the file is not shared yet); fd -1
  // when it is absent or refused.
  File Check();
  void Close() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PeerSnapshotIdentity identity_;
  natsConnection* nc_ = nullptr;
  natsSubscription* offer_sub_ = nullptr;
  natsSubscription* chunk_sub_ = nullptr;
  base::Mutex mu_;
  File file_ ABSL_GUARDED_BY(mu_);
  File prepared_ ABSL_GUARDED_BY(mu_);  // checked by Prepare, not offered yet
  std::atomic<uint64_t> served_chunks_{0};
  std::atomic<uint64_t> offers_{0};
  std::atomic<uint64_t> checks_{0};
};

// Metric label `result` of infera_router_kv_snapshot_peer_fetch_total (§10).
// kIo (not in §10's list): the joiner's own temp file could not be written.
enum class PeerFetchResult : uint8_t {
  kOk,
  kNoOffer,
  kIncompatible,
  kGone,
  kTimeout,
  kChecksum,
  kIo
};
inline constexpr size_t kPeerFetchResultCount = 7;
std::string_view PeerFetchResultName(PeerFetchResult result);

struct PeerFetchOptions {
  std::string nats_url;  // the replica-sync server
  int64_t connect_timeout_ms = 2000;
  int64_t offer_wait_ms = 500;
  int in_flight = 16;
  int64_t chunk_timeout_ms = 2000;
  int chunk_retries = 2;
  int max_offers = 3;
  // false: no fsync of the file and its directory before the rename; the caller syncs
  // them later (off the join's critical path: a file torn by a crash before that is
  // refused by the next start's checks, like any torn file).
  bool sync = true;
  // true: build the staging index from the chunks as they arrive (SnapshotStreamBuild,
  // doc/snapshot.md §9.1); the outcome carries the build, taken by the start-up load.
  bool stream_build = false;
};

struct PeerFetchOutcome {
  PeerFetchResult result = PeerFetchResult::kNoOffer;
  std::string detail;  // the reason of a failure, as logged
  uint64_t peer = 0;   // the instance the file came from
  uint64_t bytes = 0;
  int64_t took_ms = 0;
  // Where the time went (the log line; doc/perf-scale.md): connecting and the first
  // offer, the chunks of the offer taken, its fsync, and the check of the received bytes.
  int64_t offers_ms = 0, transfer_ms = 0, sync_ms = 0, check_ms = 0;
  // kOk: the fetched file as checked (mapped, every load check passed), now at the
  // path; the start-up load takes it instead of checking the same bytes again.
  std::optional<SnapshotReader> checked;
  // kOk with options.stream_build: the build of the fetched bytes, still running.
  std::unique_ptr<SnapshotStreamBuild> stream;
};

// What a peer join hands to the start-up load (KvSnapshotLoad::Open): the fetched file
// as checked and, when streamed, the build of its bytes.
struct FetchedSnapshot {
  std::optional<SnapshotReader> checked;
  std::unique_ptr<SnapshotStreamBuild> stream;
};

// Connects to options.nats_url, fetches the newest compatible peer snapshot into
// identity.path (REQUIRES: a path) and disconnects.
PeerFetchOutcome FetchPeerSnapshot(const PeerSnapshotIdentity& identity,
                                   const PeerFetchOptions& options);

// The wall clock in unix ms (offers' and files' ages).
int64_t SnapshotWallMs();

}  // namespace infera::events
