#include "events/kv_event_ingestor.h"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <stdexcept>
#include <utility>
#include <zmq.hpp>

#include "core/hashing.h"
#include "event_wire/zmq_frames.h"
#include "log/steady_clock.h"

namespace infera::events {
namespace {

// The ingestion context: libzmq's default limit is 1,023 sockets per context, and
// each target takes three (SUB, its monitor and the monitor's reader), so a router
// stopped subscribing at ~340 targets ("Too many open files", doc/perf-scale.md).
// The limit is raised to the process's descriptor limit (each socket holds at least
// one descriptor, so that is the real bound), at most libzmq's own maximum.
std::unique_ptr<zmq::context_t> IngestionContext() {
  auto ctx = std::make_unique<zmq::context_t>(1);
  rlimit limit{};
  int max_sockets = 1023;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    max_sockets = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
  }
  max_sockets = std::min(max_sockets, ctx->get(zmq::ctxopt::socket_limit));
  ctx->set(zmq::ctxopt::max_sockets, std::max(max_sockets, 1023));
  return ctx;
}

}  // namespace

struct KvEventIngestor::Conn : StreamState {
  IngestTarget spec;
  core::TargetId id = 0;
  bool alive = true;  // guarded by index_mu_: false once removed from the index

  // Ingestion thread only.
  std::unique_ptr<zmq::socket_t> sub;
  std::unique_ptr<zmq::socket_t> monitor;
  bool disconnected = false;    // a disconnect was seen since the last message
  bool initial_replay = false;  // the replay_on_add replay has not ended yet
  // Snapshots: the digest of the last applied batch's payload (the epoch check), and
  // a restored view's verification (doc/snapshot.md §6.2).
  uint64_t last_payload_xxh3 = 0;
  bool verifying = false;         // the replay in flight (or waited for) is a verify
  bool verify_checked = false;    // its first message matched the record
  bool verify_no_replay = false;  // no replay socket: the first live seq decides
  // The replay in flight (or waited for) is a reconnect probe (doc/kv-events.md §4):
  // checked like a verify (verify_checked), but a probe without an answer keeps the view.
  bool probing = false;
  // While the staging index builds (IngestorOptions::load) nothing is applied: replayed
  // batches wait in `deferred`, a replay's end in finish_pending, a resync in
  // resync_on_swap (all ingestion thread only); clear_on_swap (set by AddTarget under
  // registry_mu_): the record's block size differed. Applied after the swap.
  bool finish_pending = false;
  bool finish_ok = false;
  bool resync_on_swap = false;
  bool clear_on_swap = false;

  // Replay (ingestion thread only). `held` keeps the live messages that arrived
  // since the gap; the first is the one that revealed it.
  struct Held {
    uint64_t seq;
    std::string payload;
  };
  std::unique_ptr<zmq::socket_t> replay;  // the replay in flight
  int64_t replay_deadline_ns = 0;         // clock_ time
  bool replay_waiting = false;            // asked for, waiting for a slot
  uint64_t replay_from = 0;
  std::deque<Held> held;
  std::deque<Held> deferred;
  int replay_failures_in_row = 0;
  int64_t replay_retry_after_ns = 0;  // clock_ time

  // epoll registrations of sub, monitor and replay (ingestion thread only).
  std::array<Watch, 3> watches;

  bool replaying() const { return replay != nullptr || replay_waiting || finish_pending; }
  StreamTargetRef ref() const { return {spec, id, alive}; }

  // Snapshot for TargetStatuses().
  std::atomic<uint64_t> status_last_seq_plus1{0};
  std::atomic<bool> status_complete{false};
};

KvEventIngestor::KvEventIngestor(SharedKvIndex& index, IngestorOptions options)
    : options_(options),
      ctx_(IngestionContext()),
      replay_ctx_(IngestionContext()),
      index_mu_(index.mutex()),
      index_(index.index()),
      clock_(options_.clock != nullptr ? *options_.clock : log::ProcessSteadyClock()),
      log_(options_.log_limit, &clock_),
      applier_(index_mu_, index_, counters_, log_, options_.slice_units) {
  InitSnapshots();
  thread_ = std::thread([this] { Run(); });
}

KvEventIngestor::KvEventIngestor(IngestorOptions options)
    : options_(options),
      ctx_(IngestionContext()),
      replay_ctx_(IngestionContext()),
      owned_index_(std::make_unique<SharedKvIndex>()),
      index_mu_(owned_index_->mutex()),
      index_(owned_index_->index()),
      clock_(options_.clock != nullptr ? *options_.clock : log::ProcessSteadyClock()),
      log_(options_.log_limit, &clock_),
      applier_(index_mu_, index_, counters_, log_, options_.slice_units) {
  InitSnapshots();
  thread_ = std::thread([this] { Run(); });
}

void KvEventIngestor::InitSnapshots() {
  if (options_.load != nullptr) StartBuild();
  if (options_.restored != nullptr && !options_.restored->empty()) {
    base::MutexLock lock(registry_mu_);
    restored_ = *options_.restored;
    unclaimed_deadline_ns_ = clock_.NowNs() + options_.unclaimed_after_ms * 1'000'000;
  }
  if (!options_.snapshot.enabled()) return;
  auto stats = options_.snapshot_stats;
  if (stats == nullptr) stats = std::make_shared<KvSnapshotStats>();
  snapshotter_ = std::make_unique<KvSnapshotter>(options_.snapshot, std::move(stats));
  instance_ = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

KvEventIngestor::~KvEventIngestor() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (build_thread_.joinable()) build_thread_.join();
  if (building_.exchange(false)) {  // stopped before the swap: let no caller wait for it
    { std::lock_guard<std::mutex> lock(build_mu_); }
    build_cv_.notify_all();
  }
  // The thread closed every socket it opened; nothing else touches them.
}

core::TargetId KvEventIngestor::AddTarget(const IngestTarget& target) {
  IngestTarget spec = target;
  if (spec.block_size == 0) spec.block_size = 16;
  const std::string name = spec.key.ToString();
  for (;;) {
    {
      base::MutexLock lock(registry_mu_);
      auto it = registry_.find(name);
      // Replacing a target removes it from the index: not while the staging index builds.
      if (it == registry_.end() || it->second->spec == spec || !building_.load()) {
        return AddLocked(std::move(spec), name);
      }
    }
    WaitForBuild();
  }
}

core::TargetId KvEventIngestor::AddLocked(IngestTarget spec, const std::string& name) {
  auto it = registry_.find(name);
  if (it != registry_.end()) {
    if (it->second->spec == spec) return it->second->id;
    std::shared_ptr<Conn> old = it->second;
    registry_.erase(it);
    {
      WriterLock index_lock(index_mu_);
      old->alive = false;
      index_.RemoveTarget(old->id);
    }
    commands_.push_back({old, /*add=*/false});
  }
  auto conn = std::make_shared<Conn>();
  conn->spec = spec;
  if (options_.replay_on_add && !spec.events_endpoint.empty() && !spec.replay_endpoint.empty()) {
    conn->initial_replay = true;
    initial_replays_pending_.fetch_add(1);
  }
  {
    WriterLock index_lock(index_mu_);
    conn->id = index_.AddTarget(spec.key, spec.block_size);
    index_.SetMaxBlocks(conn->id, spec.max_blocks);
    if (auto r = restored_.find(name); r != restored_.end()) {
      ClaimRestored(*conn, r->second);
      restored_.erase(r);
    }
  }
  registry_[name] = conn;
  followed_targets_.store(static_cast<int64_t>(registry_.size()));
  commands_.push_back({conn, /*add=*/true});
  return conn->id;
}

int64_t KvEventIngestor::DescriptorsHeld() const {
  // With snapshots on, the verify replays have slots of their own and the writer holds
  // the temp file and its directory while it writes (doc/snapshot.md §5.2, §6.2).
  const bool snapshots = options_.snapshot.enabled();
  const int64_t slots = options_.max_concurrent_replays +
                        (snapshots ? options_.max_concurrent_verify_replays : 0);
  return kDescriptorsPerTarget * followed_targets_.load() + 2 * slots + (snapshots ? 2 : 0);
}

void KvEventIngestor::RemoveTarget(const core::TargetKey& key) {
  // An id freed while the staging index builds would give the next target another id
  // there than here (SwapInStaging).
  WaitForBuild();
  base::MutexLock lock(registry_mu_);
  auto it = registry_.find(key.ToString());
  if (it == registry_.end()) return;
  std::shared_ptr<Conn> conn = it->second;
  registry_.erase(it);
  followed_targets_.store(static_cast<int64_t>(registry_.size()));
  {
    WriterLock index_lock(index_mu_);
    conn->alive = false;
    index_.RemoveTarget(conn->id);
  }
  commands_.push_back({conn, /*add=*/false});
}

std::optional<core::TargetId> KvEventIngestor::FindTarget(const core::TargetKey& key) const {
  base::MutexLock lock(registry_mu_);
  auto it = registry_.find(key.ToString());
  if (it == registry_.end()) return std::nullopt;
  return it->second->id;
}

std::vector<IngestTargetStatus> KvEventIngestor::TargetStatuses() const {
  base::MutexLock lock(registry_mu_);
  std::vector<IngestTargetStatus> out;
  for (const auto& [name, c] : registry_) {
    IngestTargetStatus s;
    s.key = c->spec.key;
    s.id = c->id;
    const uint64_t plus1 = c->status_last_seq_plus1.load();
    if (plus1 != 0) s.last_seq = plus1 - 1;
    s.complete = c->status_complete.load();
    out.push_back(std::move(s));
  }
  return out;
}

void KvEventIngestor::Run() {
  try {
    RunLoop();
  } catch (const std::exception& e) {
    // A ZMQ failure here is a bug or a dying process (context terminated): say so loudly.
    spdlog::critical("kv events: ingestion thread stopped: {}", e.what());
  }
}

void KvEventIngestor::RunLoop() {
  // Readiness through epoll on each socket's ZMQ_FD (doc/kv-events.md "Concurrency"):
  // a wakeup costs O(sockets ready), not O(targets) as zmq_poll over every SUB and
  // monitor did (8,192 poll items per wakeup at 4,096 targets). ZMQ_FD is
  // edge-like: it signals when ZMQ_EVENTS may have changed, so a socket read and
  // still readable (ZMQ_EVENTS) stays in `ready_` and is read again next round.
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw std::runtime_error("epoll_create1 failed");
  std::vector<std::shared_ptr<Conn>> conns;
  std::vector<epoll_event> events(256);
  std::vector<Watch*> round;
  while (!stop_.load()) {
    log_.Flush();  // summaries of suppressed lines whose interval ended
    DrainCommands(conns);
    int64_t timeout_ms = options_.poll_interval_ms;
    const int64_t now_ns = clock_.NowNs();
    if (!drained_.empty() || (snapshotter_ != nullptr && snapshotter_->InCycle())) timeout_ms = 0;
    if (building_.load()) {
      if (build_done_.load()) SwapInStaging(conns);
      timeout_ms = std::min<int64_t>(timeout_ms, 1);  // the build's end: swap at once
    }
    if (!in_flight_.empty()) {
      for (const Conn* c : in_flight_) {
        // Rounded up: a wake-up before the deadline would find the replay not yet late.
        timeout_ms =
            std::min(timeout_ms,
                     std::max<int64_t>(0, (c->replay_deadline_ns - now_ns + 999'999) / 1'000'000));
      }
    }
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                             ready_.empty() ? static_cast<int>(timeout_ms) : 0);
    for (int i = 0; i < n; ++i) Queue(static_cast<Watch*>(events[static_cast<size_t>(i)].data.ptr));
    round.swap(ready_);
    ready_.clear();
    for (Watch* w : round) w->queued = false;
    for (Watch* w : round) {
      if (w->conn == nullptr) continue;  // its target was removed during this round
      Conn& c = *w->conn;
      switch (w->kind) {
        case WatchKind::kMonitor:
          if (c.monitor) {
            ReadMonitor(c);
            if (Readable(*c.monitor)) Queue(w);
          }
          break;
        case WatchKind::kSub:
          if (!c.sub) break;
          // A disconnect must be known before the messages after it.
          if (c.monitor && Readable(*c.monitor)) ReadMonitor(c);
          ReadMessages(c);
          if (c.sub && Readable(*c.sub)) Queue(w);
          break;
        case WatchKind::kReplay:
          if (c.replay) {
            ReadReplay(c);
            if (c.replay && Readable(*c.replay)) Queue(w);
          }
          break;
      }
    }
    round.clear();
    // Replays past their deadline fail; their targets go on from the held messages.
    if (!in_flight_.empty()) {
      const int64_t after_ns = clock_.NowNs();
      late_.clear();
      for (Conn* c : in_flight_) {
        if (after_ns >= c->replay_deadline_ns) late_.push_back(c);
      }
      for (Conn* c : late_) FinishReplay(*c, /*ok=*/false);
    }
    StartWaitingReplays();
    if (unclaimed_deadline_ns_ >= 0 && clock_.NowNs() >= unclaimed_deadline_ns_) DropUnclaimed();
    if (snapshotter_ != nullptr && SnapshotStep(conns)) break;  // final snapshot: stop
  }
  for (const auto& c : conns) {
    Unwatch(*c, WatchKind::kSub);
    Unwatch(*c, WatchKind::kMonitor);
    Unwatch(*c, WatchKind::kReplay);
    CloseMonitoredSub(c->sub, c->monitor);
    c->replay.reset();
  }
  close(epoll_fd_);
  epoll_fd_ = -1;
}

bool KvEventIngestor::Readable(zmq::socket_t& s) {
  return (s.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
}

void KvEventIngestor::Queue(Watch* w) {
  if (w->queued) return;
  w->queued = true;
  ready_.push_back(w);
}

void KvEventIngestor::WatchSocket(Conn& c, WatchKind kind) {
  zmq::socket_t* s = kind == WatchKind::kSub       ? c.sub.get()
                     : kind == WatchKind::kMonitor ? c.monitor.get()
                                                   : c.replay.get();
  Watch& w = c.watches[static_cast<size_t>(kind)];
  if (s == nullptr || w.fd >= 0) return;
  w.conn = &c;
  w.kind = kind;
  w.fd = s->get(zmq::sockopt::fd);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &w;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, w.fd, &ev);
  Queue(&w);  // messages may be queued already: ZMQ_FD signals only changes
}

void KvEventIngestor::Unwatch(Conn& c, WatchKind kind) {
  Watch& w = c.watches[static_cast<size_t>(kind)];
  if (w.fd < 0) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, w.fd, nullptr);
  w.fd = -1;
  if (w.queued) {
    std::erase(ready_, &w);
    w.queued = false;
  }
}

void KvEventIngestor::DrainCommands(std::vector<std::shared_ptr<Conn>>& conns) {
  {
    base::MutexLock lock(registry_mu_);
    for (Command& cmd : commands_) drained_.push_back(std::move(cmd));
    commands_.clear();
  }
  // At most kAddsPerRound subscriptions a round: a fleet's thousands of targets must
  // not hold back the verify replays of the first ones (doc/snapshot.md §8.1).
  int round_adds = 0;
  while (!drained_.empty() && round_adds < kAddsPerRound) {
    const Command cmd = std::move(drained_.front());
    drained_.pop_front();
    if (cmd.add) {
      ++round_adds;
      OpenSockets(*cmd.conn);
      WatchSocket(*cmd.conn, WatchKind::kMonitor);
      WatchSocket(*cmd.conn, WatchKind::kSub);
      conns.push_back(cmd.conn);
      if (cmd.conn->initial_replay) {
        // Warm start: everything the engine still buffers, before its live stream; a
        // restored view only what came after its record (a verify replay).
        Conn& c = *cmd.conn;
        c.replay_from = c.verifying ? *c.seq.last() : 0;
        if (c.sub) {
          // Started at the end of this round (StartWaitingReplays): opening thousands
          // of targets' sockets first must not eat into the replays' deadlines.
          c.replay_waiting = true;
          (c.verifying ? waiting_verifies_ : waiting_replays_).push_back(&c);
        } else {
          c.verifying = false;
          EndInitialReplay(c);
        }
      }
      continue;
    }
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      if (*it == cmd.conn) {
        Conn& c = **it;
        Unwatch(c, WatchKind::kSub);
        Unwatch(c, WatchKind::kMonitor);
        Unwatch(c, WatchKind::kReplay);
        for (Watch& w : c.watches) w.conn = nullptr;  // in this round's list, skipped
        CloseMonitoredSub(c.sub, c.monitor);
        if (c.replay) {
          c.replay.reset();
          ReleaseSlot(c);
        }
        c.replay_waiting = false;
        c.held.clear();
        std::erase(waiting_replays_, &c);
        std::erase(waiting_verifies_, &c);  // an export in progress skips it (alive)
        EndInitialReplay(c);
        conns.erase(it);
        break;
      }
    }
  }
}

void KvEventIngestor::OpenSockets(Conn& c) {
  if (c.spec.events_endpoint.empty()) return;
  try {
    MonitoredSub m = OpenMonitoredSub(*ctx_, c.spec.events_endpoint,
                                      {.topic = c.spec.topic,
                                       .receive_hwm = options_.receive_hwm,
                                       .reconnect_ivl_ms = options_.reconnect_ivl_ms,
                                       .reconnect_ivl_max_ms = options_.reconnect_ivl_max_ms});
    c.sub = std::move(m.sub);
    c.monitor = std::move(m.monitor);
  } catch (const zmq::error_t& e) {
    spdlog::error("kv events: cannot subscribe {} at '{}': {}", c.spec.key.ToString(),
                  c.spec.events_endpoint, e.what());
  }
}

void KvEventIngestor::ReadMonitor(Conn& c) {
  const MonitorEvents e = events::ReadMonitor(*c.monitor);
  if (e.disconnected) c.disconnected = true;
  if (e.connected_last && c.disconnected) ProbeReconnected(c);
}

void KvEventIngestor::ProbeReconnected(Conn& c) {
  // An engine that restarted and stays idle sends no live message that would reveal it:
  // ask its replay socket at once whether it still buffers the batch applied last
  // (CheckVerify). Otherwise (no replay socket, nothing applied, a replay already under
  // way, the replay backing off) the next live message decides (Process).
  if (!c.seq.last() || c.replaying() || !ReplayAllowed(c)) return;
  c.probing = true;
  c.replay_from = *c.seq.last();
  QueueReplay(c);
}

void KvEventIngestor::ReadMessages(Conn& c) {
  for (int i = 0; i < options_.max_messages_per_wakeup; ++i) {
    std::vector<zmq::message_t> frames = RecvMultipart(*c.sub);
    if (frames.empty()) return;
    if (frames.size() != 3 || frames[1].size() != 8) {
      counters_.messages.fetch_add(1, std::memory_order_relaxed);
      counters_.decode_errors.fetch_add(1, std::memory_order_relaxed);
      continue;  // not a KV-event message: no sequence number to act on
    }
    HandleLive(c, ReadBE64(frames[1]), frames[2].data(), frames[2].size());
  }
}

void KvEventIngestor::HandleLive(Conn& c, uint64_t seq, const void* payload, size_t size) {
  counters_.messages.fetch_add(1, std::memory_order_relaxed);
  if (c.replaying() || building_.load()) {
    c.held.push_back({seq, std::string(static_cast<const char*>(payload), size)});
    if (c.held.size() > options_.max_held_messages) {
      const std::string name = c.spec.key.ToString();
      log_.Warn("kv events: replay abandoned|" + name,
                "kv events: {} replay abandoned: {} live messages arrived meanwhile", name,
                c.held.size());
      FinishReplay(c, /*ok=*/false);
    }
    return;
  }
  Process(c, seq, payload, size);
}

bool KvEventIngestor::ReplayAllowed(const Conn& c) const {
  return !c.spec.replay_endpoint.empty() && clock_.NowNs() >= c.replay_retry_after_ns;
}

void KvEventIngestor::Process(Conn& c, uint64_t seq, const void* payload, size_t size) {
  if (c.verify_no_replay) {
    // A restored view without a replay socket: kept only if the stream continues
    // right after its record (doc/snapshot.md §6.2).
    c.verify_no_replay = false;
    const bool keep = c.seq.IsNext(seq);
    CountVerify(c, keep ? VerifyResult::kNoReplayOk : VerifyResult::kNoReplayResync);
    if (!keep) {
      Resync(c);
      c.seq.Reset();
    }
  }
  if (c.disconnected) {
    c.disconnected = false;
    if (c.seq.last() && !c.seq.IsNext(seq)) {
      // After a reconnect the stream does not continue where it stopped: the publisher
      // restarted (and its first messages went by before we reconnected) or we lost
      // messages across the outage. Either way our view may be stale: start over.
      const std::string name = c.spec.key.ToString();
      log_.Info("kv events: reconnected|" + name,
                "kv events: {} reconnected at seq {} after {}: resync", name, seq, *c.seq.last());
      counters_.restarts.fetch_add(1, std::memory_order_relaxed);
      Resync(c);
      c.seq.Reset();
    }
  }
  switch (c.seq.Classify(seq)) {
    case SequenceTracker::Class::kNext:
      Apply(c, seq, payload, size);
      break;
    case SequenceTracker::Class::kDuplicate:
      counters_.dropped.fetch_add(1, std::memory_order_relaxed);
      break;
    case SequenceTracker::Class::kRestart:
      log_.Info("kv events: sequence restarted|" + c.spec.key.ToString(),
                "kv events: {} sequence restarted at 0 after {}: resync", c.spec.key.ToString(),
                *c.seq.last());
      counters_.restarts.fetch_add(1, std::memory_order_relaxed);
      Resync(c);
      c.seq.Reset();
      Apply(c, seq, payload, size);
      break;
    case SequenceTracker::Class::kFirst:
      if (options_.initial_replay && ReplayAllowed(c)) {
        BeginReplay(c, 0, seq, payload, size);
        return;
      }
      CatchUp(c, seq, payload, size);
      break;
    case SequenceTracker::Class::kGap:
      counters_.gaps.fetch_add(1, std::memory_order_relaxed);
      if (ReplayAllowed(c)) {
        BeginReplay(c, *c.seq.last() + 1, seq, payload, size);
        return;
      }
      if (!c.spec.replay_endpoint.empty()) {
        counters_.replays_skipped.fetch_add(1, std::memory_order_relaxed);
      }
      CatchUp(c, seq, payload, size);
      break;
  }
  PublishStatus(c);
}

void KvEventIngestor::CatchUp(Conn& c, uint64_t seq, const void* payload, size_t size) {
  if (c.seq.AlreadyApplied(seq)) return;  // the replay delivered it
  if (!c.seq.IsNext(seq)) {
    // Batches before `seq` are lost for good.
    if (c.seq.last()) {
      Resync(c);
    } else {
      c.complete = false;  // first contact: the view is empty, just not complete
    }
  }
  Apply(c, seq, payload, size);
}

void KvEventIngestor::BeginReplay(Conn& c, uint64_t from_seq, uint64_t seq, const void* payload,
                                  size_t size) {
  c.held.push_back({seq, std::string(static_cast<const char*>(payload), size)});
  c.replay_from = from_seq;
  QueueReplay(c);
}

void KvEventIngestor::StartReplay(Conn& c) {
  c.replay_waiting = false;
  counters_.replays.fetch_add(1, std::memory_order_relaxed);
  c.replay_deadline_ns = clock_.NowNs() + int64_t{options_.replay_timeout_ms} * 1'000'000;
  try {
    auto dealer = std::make_unique<zmq::socket_t>(*replay_ctx_, zmq::socket_type::dealer);
    dealer->set(zmq::sockopt::linger, 0);
    dealer->connect(c.spec.replay_endpoint);
    c.replay = std::move(dealer);
    WatchSocket(c, WatchKind::kReplay);
    ++(c.verifying ? active_verifies_ : active_replays_);
    in_flight_.push_back(&c);
    const std::string start = BE64(c.replay_from);
    // connect() made the peer's queue: the request is queued, never blocks.
    const bool sent =
        c.replay->send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
        c.replay->send(zmq::buffer(start), zmq::send_flags::dontwait);
    if (!sent) FinishReplay(c, /*ok=*/false);
  } catch (const zmq::error_t& e) {
    if (e.num() == EMFILE && c.replay == nullptr) {
      // Out of descriptors for a moment (closed replay sockets not reaped yet, 64
      // verify replays at once): wait for a slot again rather than fail the replay.
      counters_.replays.fetch_sub(1, std::memory_order_relaxed);
      c.replay_waiting = true;
      (c.verifying ? waiting_verifies_ : waiting_replays_).push_front(&c);
      replay_pause_until_ns_ = clock_.NowNs() + kReplayPauseNs;
      return;
    }
    log_.Warn("kv events: replay failed|" + c.spec.key.ToString(),
              "kv events: replay from {} failed: {}", c.spec.replay_endpoint, e.what());
    FinishReplay(c, /*ok=*/false);
  }
}

void KvEventIngestor::ReadReplay(Conn& c) {
  for (int i = 0; i < options_.max_messages_per_wakeup && c.replay; ++i) {
    std::vector<zmq::message_t> frames = RecvMultipart(*c.replay);
    if (frames.empty()) return;
    if (frames.size() != 3 || frames[0].size() != 0 || frames[1].size() != 8) {
      FinishReplay(c, /*ok=*/false);
      return;
    }
    const uint64_t seq = ReadBE64(frames[1]);
    if ((c.verifying || c.probing) && !c.verify_checked &&
        !CheckVerify(c, seq, frames[2].data(), frames[2].size())) {
      return;  // the view was cleared and a replay from 0 replaces this one
    }
    if (seq == kReplayEndMarker) {
      FinishReplay(c, /*ok=*/true);
      return;
    }
    counters_.replayed_batches.fetch_add(1, std::memory_order_relaxed);
    if (building_.load()) {
      c.deferred.push_back(
          {seq, std::string(static_cast<const char*>(frames[2].data()), frames[2].size())});
      continue;
    }
    ApplyReplayed(c, seq, frames[2].data(), frames[2].size());
  }
}

void KvEventIngestor::ApplyReplayed(Conn& c, uint64_t seq, const void* payload, size_t size) {
  if (c.seq.AlreadyApplied(seq)) return;
  if (!c.seq.IsNext(seq)) {
    // The engine's buffer no longer reaches back to what we miss.
    if (c.seq.last()) {
      Resync(c);
    } else {
      c.complete = false;
    }
  }
  Apply(c, seq, payload, size);
}

void KvEventIngestor::EndInitialReplay(Conn& c) {
  if (!c.initial_replay) return;
  c.initial_replay = false;
  initial_replays_pending_.fetch_sub(1);
}

void KvEventIngestor::FinishReplay(Conn& c, bool ok) {
  if (c.replay) {
    Unwatch(c, WatchKind::kReplay);
    c.replay.reset();
    ReleaseSlot(c);
  }
  if (c.replay_waiting) {
    c.replay_waiting = false;
    std::erase(waiting_replays_, &c);
    std::erase(waiting_verifies_, &c);
  }
  if (building_.load()) {
    // The slot is free for the next verify; the rest waits for the swap (ReleaseDeferred).
    c.finish_ok = c.finish_pending ? c.finish_ok && ok : ok;
    c.finish_pending = true;
    return;
  }
  if (c.verifying && !c.verify_checked) {
    // Cannot verify (timeout, malformed): rebuild from the live stream (§6.2).
    CountVerify(c, VerifyResult::kFailed);
    Resync(c);
    c.seq.Reset();
  }
  c.verifying = false;
  c.verify_checked = false;
  // A probe without an answer keeps the view and `disconnected`: the next live message
  // decides, as without a probe. After a probe every held message is judged as live
  // (a gap after the replayed ones is replayed, not resynced).
  const bool probe = std::exchange(c.probing, false);
  const int64_t now_ns = clock_.NowNs();
  if (ok) {
    c.replay_failures_in_row = 0;
  } else {
    counters_.replay_failures.fetch_add(1, std::memory_order_relaxed);
    c.replay_failures_in_row = std::min(c.replay_failures_in_row + 1, 30);
    const int64_t backoff_ms = std::min<int64_t>(
        options_.replay_backoff_max_ms,
        int64_t{options_.replay_backoff_initial_ms} << std::min(c.replay_failures_in_row - 1, 20));
    c.replay_retry_after_ns = now_ns + backoff_ms * 1'000'000;
    log_.Warn("kv events: replay failed|" + c.spec.key.ToString(),
              "kv events: replay of {} from {} failed ({} in a row); no replay for {} ms",
              c.spec.key.ToString(), c.spec.replay_endpoint, c.replay_failures_in_row, backoff_ms);
  }
  ReleaseHeld(c, /*first_catch_up=*/!probe);
  // Last: a reader that sees Replaying() false (/ready, tests) then reads this
  // target's final status and view, not the state before the held messages.
  EndInitialReplay(c);
}

void KvEventIngestor::ReleaseHeld(Conn& c, bool first_catch_up) {
  std::deque<Conn::Held> held;
  held.swap(c.held);
  bool first = first_catch_up;
  while (!held.empty()) {
    Conn::Held m = std::move(held.front());
    held.pop_front();
    if (c.replaying()) {
      c.held.push_back(std::move(m));  // a new replay began: hold the rest again
    } else if (first) {
      CatchUp(c, m.seq, m.payload.data(), m.payload.size());
    } else {
      Process(c, m.seq, m.payload.data(), m.payload.size());
    }
    first = false;
  }
  PublishStatus(c);
}

void KvEventIngestor::StartWaitingReplays() {
  if (clock_.NowNs() < replay_pause_until_ns_) return;
  while (active_replays_ < options_.max_concurrent_replays && !waiting_replays_.empty() &&
         clock_.NowNs() >= replay_pause_until_ns_) {
    Conn* c = waiting_replays_.front();
    waiting_replays_.pop_front();
    if (c->replay_waiting) StartReplay(*c);
  }
  while (active_verifies_ < options_.max_concurrent_verify_replays && !waiting_verifies_.empty() &&
         clock_.NowNs() >= replay_pause_until_ns_) {
    Conn* c = waiting_verifies_.front();
    waiting_verifies_.pop_front();
    if (c->replay_waiting) StartReplay(*c);
  }
}

void KvEventIngestor::Apply(Conn& c, uint64_t seq, const void* payload, size_t size) {
  // The digest the snapshot records and the reconnect probe compare with.
  if (snapshotter_ != nullptr || !c.spec.replay_endpoint.empty()) {
    c.last_payload_xxh3 = XXH3_64bits(payload, size);
  }
  if (!applier_.Apply(c, c.ref(), seq,
                      std::span<const uint8_t>(static_cast<const uint8_t*>(payload), size))) {
    Resync(c);  // the batch's events are lost: the view may hold stale blocks
  }
}

void KvEventIngestor::Resync(Conn& c) {
  if (building_.load()) {
    // The view to clear is in the staging index: cleared there at the swap.
    c.resync_on_swap = true;
    c.deferred.clear();
    c.complete = false;
    counters_.resyncs.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  applier_.Clear(c, c.ref());
}

void KvEventIngestor::PublishStatus(Conn& c) {
  const std::optional<uint64_t> last = c.seq.last();
  c.status_last_seq_plus1.store(last ? *last + 1 : 0);
  c.status_complete.store(c.complete);
}

// --- Verify replays (doc/snapshot.md §6.2) ---

void KvEventIngestor::ClaimRestored(Conn& c, const RestoredTarget& record) {
  if (record.block_size != c.spec.block_size) {
    if (building_.load()) {
      c.clear_on_swap = true;  // its view is in the staging index (SwapInStaging)
    } else {
      index_.ApplyCleared(c.id);
    }
    if (options_.snapshot_stats) options_.snapshot_stats->refused_block_size.fetch_add(1);
    return;
  }
  if (!record.position.has_position || c.spec.events_endpoint.empty()) return;  // first contact
  c.seq.Advance(record.position.last_seq);
  c.complete = record.position.complete;
  c.last_payload_xxh3 = record.position.last_payload_xxh3;
  if (c.spec.replay_endpoint.empty()) {
    c.verify_no_replay = true;
    return;
  }
  c.verifying = true;
  if (!c.initial_replay) {
    c.initial_replay = true;
    initial_replays_pending_.fetch_add(1);
  }
}

void KvEventIngestor::DropUnclaimed() {
  unclaimed_deadline_ns_ = -1;
  RestoredTargets unclaimed;
  {
    base::MutexLock lock(registry_mu_);
    unclaimed.swap(restored_);
    WriterLock index_lock(index_mu_);
    for (const auto& [name, record] : unclaimed) {
      if (std::optional<core::TargetId> id = index_.FindTarget(record.key)) {
        index_.RemoveTarget(*id);
      }
    }
  }
  if (unclaimed.empty()) return;
  if (options_.snapshot_stats) options_.snapshot_stats->refused_unclaimed.fetch_add(unclaimed.size());
  spdlog::info("kv-snapshot: {} restored target(s) not added by discovery within {} ms: dropped",
               unclaimed.size(), options_.unclaimed_after_ms);
}

bool KvEventIngestor::SlotFree(const Conn& c) const {
  return c.verifying ? active_verifies_ < options_.max_concurrent_verify_replays
                     : active_replays_ < options_.max_concurrent_replays;
}

void KvEventIngestor::QueueReplay(Conn& c) {
  if (SlotFree(c) && clock_.NowNs() >= replay_pause_until_ns_) {
    StartReplay(c);
    return;
  }
  c.replay_waiting = true;
  (c.verifying ? waiting_verifies_ : waiting_replays_).push_back(&c);
}

void KvEventIngestor::ReleaseSlot(Conn& c) {
  --(c.verifying ? active_verifies_ : active_replays_);
  std::erase(in_flight_, &c);
}

void KvEventIngestor::CountVerify(Conn& c, VerifyResult result) {
  if (options_.snapshot_stats) {
    options_.snapshot_stats->verify[static_cast<size_t>(result)].fetch_add(1);
  }
  if (result == VerifyResult::kOk || result == VerifyResult::kNoReplayOk) return;
  const std::string name = c.spec.key.ToString();
  log_.Info("kv-snapshot: verify|" + name, "kv-snapshot: {} verify {}: view rebuilt", name,
            VerifyResultName(result));
}

bool KvEventIngestor::CheckVerify(Conn& c, uint64_t seq, const void* payload, size_t size) {
  const uint64_t last = *c.seq.last();
  VerifyResult result = VerifyResult::kGap;
  if (seq == kReplayEndMarker) {
    result = VerifyResult::kEmpty;
  } else if (seq == last) {
    if (XXH3_64bits(payload, size) == c.last_payload_xxh3) {
      c.verify_checked = true;
      if (c.probing) {
        c.disconnected = false;  // the same stream: the probe decided
      } else {
        CountVerify(c, VerifyResult::kOk);
      }
      return true;
    }
    result = VerifyResult::kEpoch;
  }
  if (c.probing) {
    // The engine restarted (or its buffer rolled past `last`): our view is stale.
    c.disconnected = false;
    const std::string name = c.spec.key.ToString();
    log_.Info("kv events: reconnected|" + name,
              "kv events: {} reconnected to a replay buffer without seq {} as applied ({}): "
              "resync",
              name, last,
              result == VerifyResult::kEmpty  ? "nothing buffered from it"
              : result == VerifyResult::kGap ? "the buffer starts after it"
                                              : "another payload");
    counters_.restarts.fetch_add(1, std::memory_order_relaxed);
  } else {
    CountVerify(c, result);
  }
  RestartFromZero(c);
  return false;
}

void KvEventIngestor::RestartFromZero(Conn& c) {
  Unwatch(c, WatchKind::kReplay);
  c.replay.reset();
  ReleaseSlot(c);
  c.verifying = false;
  c.probing = false;
  Resync(c);
  c.seq.Reset();
  c.replay_from = 0;
  QueueReplay(c);  // as first contact; the live messages stay held
}

// --- The staging build (doc/snapshot.md §6.1, §8.1 step 3) ---

void KvEventIngestor::StartBuild() {
  const std::vector<RestoredTarget>& records = options_.load->records();
  base::MutexLock lock(registry_mu_);
  {
    // Record i gets id i here and in the staging index (both fresh, the same AddTarget
    // calls in the same order); discovery's AddTarget of a restored key returns it.
    WriterLock index_lock(index_mu_);
    if (!index_.Targets().empty()) {
      spdlog::error("kv-snapshot: the index already holds targets: snapshot not restored");
      return;
    }
    for (const RestoredTarget& r : records) index_.AddTarget(r.key, r.block_size);
  }
  for (const RestoredTarget& r : records) restored_[r.key.ToString()] = r;
  load_ = options_.load;
  building_.store(true);
  build_thread_ = std::thread([this] {
    staging_ = load_->Build(build_failed_);
    build_done_.store(true);
  });
}

void KvEventIngestor::WaitForBuild() {
  std::unique_lock<std::mutex> lock(build_mu_);
  build_cv_.wait(lock, [&] { return !building_.load(); });
}

void KvEventIngestor::SwapInStaging(const std::vector<std::shared_ptr<Conn>>& conns) {
  build_thread_.join();
  core::KvIndex staging = std::move(staging_);
  {
    base::MutexLock lock(registry_mu_);
    bool salted = false;
    const size_t staged = staging.Targets().size();  // the records' ids: 0..staged-1
    {
      ReaderLock index_lock(index_mu_);
      salted = index_.SaltedTraffic();
      // Targets discovery added since the records: nothing was removed from either
      // index, so in id order they get the same ids in the staging index.
      AddTargetsAddedSince(index_, staged, staging);
    }
    for (auto& [name, c] : registry_) {
      staging.AddTarget(c->spec.key, c->spec.block_size);
      staging.SetMaxBlocks(c->id, c->spec.max_blocks);
      if (c->clear_on_swap || c->resync_on_swap) staging.ApplyCleared(c->id);
    }
    auto claim = [&](const core::TargetKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu_) {
      auto it = registry_.find(key.ToString());
      if (it == registry_.end()) return false;
      it->second->complete = false;  // claimed: the view is empty, not the record's
      return true;
    };
    DropFailedRecords(staging, build_failed_, restored_, claim);
    if (salted) staging.NoteSaltedTraffic();
    {
      WriterLock index_lock(index_mu_);
      index_ = std::move(staging);
    }
    unclaimed_deadline_ns_ =
        restored_.empty() ? -1 : clock_.NowNs() + options_.unclaimed_after_ms * 1'000'000;
    building_.store(false);
  }
  { std::lock_guard<std::mutex> lock(build_mu_); }
  build_cv_.notify_all();
  // `staging` holds the former index of the records' empty targets: freed off-lock.
  size_t ended = 0, waiting = 0;
  for (const auto& c : conns) {
    ended += c->finish_pending ? 1 : 0;
    waiting += c->replay_waiting ? 1 : 0;
    ReleaseDeferred(*c);
  }
  spdlog::info(
      "kv-snapshot: staging index swapped in; {} targets followed, {} replays ended during "
      "the build, {} in flight, {} waiting",
      conns.size(), ended, in_flight_.size(), waiting);
}

void KvEventIngestor::ReleaseDeferred(Conn& c) {
  c.resync_on_swap = false;
  std::deque<Conn::Held> deferred;
  deferred.swap(c.deferred);
  for (const Conn::Held& m : deferred) ApplyReplayed(c, m.seq, m.payload.data(), m.payload.size());
  if (c.finish_pending) {
    c.finish_pending = false;
    FinishReplay(c, c.finish_ok);
  } else if (!c.replaying()) {
    ReleaseHeld(c, /*first_catch_up=*/false);
  }
}

// --- Snapshots (doc/snapshot.md §5) ---

bool KvEventIngestor::SnapshotStep(const std::vector<std::shared_ptr<Conn>>& conns) {
  const int64_t now_ns = clock_.NowNs();
  if (building_.load()) {
    // The views are not in the index yet: no snapshot, and at SIGTERM the file being
    // restored stays the snapshot.
    if (!final_requested_.load()) return false;
    spdlog::info("kv-snapshot: final snapshot not written: the restore had not ended ({} kept)",
                 options_.snapshot.path);
    {
      std::lock_guard<std::mutex> lock(final_mu_);
      final_exported_ = true;
    }
    final_cv_.notify_all();
    return true;
  }
  if (final_requested_.load()) {
    snapshotter_->Abort(now_ns);
    BeginSnapshot(conns, now_ns);
    while (!stop_.load() && ExportStep()) {
    }
    snapshotter_->End(clock_.NowNs());
    {
      std::lock_guard<std::mutex> lock(final_mu_);
      final_exported_ = true;
    }
    final_cv_.notify_all();
    return true;
  }
  if (!snapshotter_->InCycle()) {
    if (!snapshotter_->Due(now_ns)) return false;
    BeginSnapshot(conns, now_ns);
  }
  if (!ExportStep()) snapshotter_->End(clock_.NowNs());
  return false;
}

void KvEventIngestor::BeginSnapshot(const std::vector<std::shared_ptr<Conn>>& conns,
                                    int64_t now_ns) {
  export_targets_ = conns;
  export_next_ = 0;
  SnapshotHeader header{.hash_scheme = core::kHashSchemeVersion,
                        .writer_instance = instance_,
                        .transport = SnapshotTransport::kZmq,
                        .fleet_id = options_.snapshot.fleet_id};
  uint64_t distinct = 0;
  {
    ReaderLock lock(index_mu_);
    header.salted_traffic = index_.SaltedTraffic();
    distinct = index_.DistinctHashCount();
  }
  snapshotter_->Begin(header, distinct, now_ns);
}

// Exports whole targets, up to kStepBlocks blocks (at least one target), under one
// shared hold; returns whether targets remain.
bool KvEventIngestor::ExportStep() {
  constexpr size_t kStepBlocks = 16'384;
  std::vector<SnapshotRecord> step;
  size_t blocks = 0;
  {
    ReaderLock lock(index_mu_);
    while (export_next_ < export_targets_.size() && blocks < kStepBlocks) {
      Conn& c = *export_targets_[export_next_++];
      if (!c.alive) continue;
      SnapshotRecord& r = step.emplace_back();
      r.key = c.spec.key;
      r.block_size = c.spec.block_size;
      const std::optional<uint64_t> last = c.seq.last();
      r.position = {.has_position = last.has_value(),
                    .complete = c.complete,
                    .last_seq = last.value_or(0),
                    .last_payload_xxh3 = last ? c.last_payload_xxh3 : 0};
      index_.ExportView(c.id, r.view);
      blocks += r.view.blocks.size();
    }
  }
  if (!step.empty()) snapshotter_->Push(std::move(step));
  if (export_next_ < export_targets_.size()) return true;
  export_targets_.clear();
  return false;
}

void KvEventIngestor::RequestFinalSnapshot() {
  if (snapshotter_ != nullptr) final_requested_.store(true);
}

bool KvEventIngestor::WaitFinalSnapshot(int64_t timeout_ms) {
  if (snapshotter_ == nullptr) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  {
    std::unique_lock<std::mutex> lock(final_mu_);
    if (!final_cv_.wait_until(lock, deadline, [&] { return final_exported_; })) return false;
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return snapshotter_->WaitIdle(std::max<int64_t>(0, left.count()));
}

}  // namespace infera::events
