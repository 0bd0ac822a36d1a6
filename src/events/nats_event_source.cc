#include "events/nats_event_source.h"

#include <spdlog/spdlog.h>

#include <random>

#include "event_wire/nats_subject.h"
#include "log/steady_clock.h"

namespace infera::events {

NatsEventSource::NatsEventSource(SharedKvIndex& index, NatsSourceOptions options)
    : options_(std::move(options)),
      index_mu_(index.mutex()),
      index_(index.index()),
      clock_(options_.clock != nullptr ? *options_.clock : log::ProcessSteadyClock()),
      log_({}, &clock_),
      applier_(index_mu_, index_, counters_, log_) {
  NatsOptions nats = options_.nats;
  // After a reconnect libnats resets the ordered consumer itself (from the stream
  // sequence after the last one delivered). Draining it here at the same time raced
  // with that reset inside libnats 3.4 (a heap-use-after-free in
  // jsSub_deleteConsumerAfterDrain, found by ASan): a reconnect only wakes Run() to
  // subscribe if no subscription exists yet.
  nats.on_reconnect = [this] { run_cv_.NotifyAll(); };
  absl::StatusOr<std::unique_ptr<NatsConnection>> nc = NatsConnection::Connect(std::move(nats));
  if (!nc.ok()) {
    spdlog::error("kv events: {}", nc.status().ToString());
    ready_.store(true);  // nothing to wait for: the views fill from nothing
    return;
  }
  nc_ = *std::move(nc);
  if (options_.snapshot.enabled()) {
    auto stats = options_.snapshot_stats;
    if (stats == nullptr) stats = std::make_shared<KvSnapshotStats>();
    snapshotter_ = std::make_unique<KvSnapshotter>(options_.snapshot, std::move(stats));
    instance_ = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  }
  if (options_.load != nullptr) RegisterRecords();
  thread_ = std::thread([this] { Run(); });
}

NatsEventSource::~NatsEventSource() {
  {
    base::MutexLock lock(run_mu_);
    stop_ = true;
  }
  run_cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  building_.store(false);  // stopped before the swap: let no caller wait for it
  run_cv_.NotifyAll();
  DestroySubscription();
  nc_.reset();
}

void NatsEventSource::Run() {
  if (load_ != nullptr) BuildAndSwap();  // before the first subscription
  const int64_t start_ns = clock_.NowNs();
  while (true) {
    {
      base::MutexLock lock(run_mu_);
      if (stop_) return;
    }
    log_.Flush();  // summaries of suppressed lines whose interval ended
    if (sub_ == nullptr) Subscribe();
    if (unclaimed_deadline_ns_ >= 0 && clock_.NowNs() >= unclaimed_deadline_ns_) DropUnclaimed();
    SnapshotTick();
    if (!ready_.load() && clock_.NowNs() - start_ns > options_.ready_timeout_ms * 1'000'000) {
      spdlog::warn("kv events: JetStream replay not done after {} ms; reporting ready",
                   options_.ready_timeout_ms);
      ready_.store(true);
    }
    base::MutexLock lock(run_mu_);
    run_cv_.WaitFor(run_mu_, options_.retry_interval_ms,
                    [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) { return StopOrFinal(); });
    if (stop_) return;
  }
}

bool NatsEventSource::Subscribe() {
  if (!nc_->connected()) return false;
  if (absl::Status s = nc_->EnsureStream(options_.limits); !s.ok()) {
    spdlog::warn("kv events: {}", s.ToString());
    return false;
  }
  absl::StatusOr<NatsStreamPosition> position = nc_->StreamPosition();
  if (!position.ok()) {
    spdlog::warn("kv events: {}", position.status().ToString());
    return false;
  }
  const uint64_t last = position->last_seq;
  uint64_t start_seq = 1;
  {
    base::MutexLock lock(mu_);
    if (check_stream_) CheckStream(*position);  // may move last_stream_seq_ to the snapshot's
    if (stream_created_ns_ == 0) stream_created_ns_ = position->created_ns;
    start_seq = last_stream_seq_ + 1;
    if (!ready_at_seq_) ready_at_seq_ = last;
    if (*ready_at_seq_ <= last_stream_seq_) ready_.store(true);
  }
  const std::string stream(kNatsStreamName), subjects(kNatsStreamSubjects);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Ordered = true;
  if (start_seq > 1) {
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = start_seq;
  } else {
    so.Config.DeliverPolicy = js_DeliverAll;
  }
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsSubscription* sub = nullptr;
  natsStatus s = js_Subscribe(&sub, nc_->js(), subjects.c_str(), &NatsEventSource::OnMessage, this,
                              nullptr, &so, &jerr);
  if (s != NATS_OK) {
    spdlog::warn("kv events: {}", NatsError("subscribe " + subjects, s, jerr).ToString());
    return false;
  }
  sub_ = sub;
  spdlog::info("kv events: following JetStream {} from stream seq {} (ready at {})", stream,
               start_seq, last);
  return true;
}

void NatsEventSource::DestroySubscription() {
  // A drained subscription has delivered its last callback; when the connection is
  // down the drain cannot run: unsubscribe (late callbacks are dropped as duplicates).
  events::DestroySubscription(sub_, nc_->request_timeout_ms());
}

void NatsEventSource::OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  static_cast<NatsEventSource*>(closure)->HandleMessage(msg);
  natsMsg_Destroy(msg);
}

void NatsEventSource::HandleMessage(natsMsg* msg) {
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, msg) != NATS_OK) return;  // not a stream message
  const uint64_t stream_seq = meta->Sequence.Stream;
  const uint64_t pending = meta->NumPending;
  jsMsgMetaData_Destroy(meta);
  base::MutexLock lock(mu_);
  if (frozen_) return;  // the final snapshot: the stream keeps it for the next start
  if (stream_seq <= last_stream_seq_) {
    counters_.dropped.fetch_add(1, std::memory_order_relaxed);  // delivered again
    return;
  }
  last_stream_seq_ = stream_seq;
  counters_.messages.fetch_add(1, std::memory_order_relaxed);
  const std::optional<uint64_t> seq = EngineSeqHeader(msg);
  const std::optional<core::TargetKey> key = ParseKvEventSubject(natsMsg_GetSubject(msg));
  if (seq && key) {
    const std::string subject = KvEventSubject(*key);
    const auto* data = reinterpret_cast<const uint8_t*>(natsMsg_GetData(msg));
    const std::span<const uint8_t> payload(data, static_cast<size_t>(natsMsg_GetDataLength(msg)));
    auto it = targets_.find(subject);
    if (it != targets_.end()) {
      Handle(*it->second, *seq, stream_seq, payload);
    } else {
      Hold(subject, *seq, stream_seq, payload);
    }
  } else {
    counters_.decode_errors.fetch_add(1, std::memory_order_relaxed);
  }
  if (!ready_.load() && (pending == 0 || (ready_at_seq_ && stream_seq >= *ready_at_seq_))) {
    spdlog::info("kv events: JetStream replayed up to stream seq {}", stream_seq);
    ready_.store(true);
  }
}

void NatsEventSource::Handle(Target& t, uint64_t seq, uint64_t stream_seq,
                             std::span<const uint8_t> payload) {
  t.stream_seq = stream_seq;
  switch (t.seq.Classify(seq)) {
    case SequenceTracker::Class::kNext:
      break;
    case SequenceTracker::Class::kDuplicate:
      counters_.dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    case SequenceTracker::Class::kRestart:
      log_.Info("kv events: sequence restarted|" + t.spec.key.ToString(),
                "kv events: {} sequence restarted at 0 after {}: resync", t.spec.key.ToString(),
                *t.seq.last());
      counters_.restarts.fetch_add(1, std::memory_order_relaxed);
      applier_.Clear(t, t.ref());
      t.seq.Reset();
      break;
    case SequenceTracker::Class::kFirst:
      t.complete = false;  // the stream no longer holds the target's start
      break;
    case SequenceTracker::Class::kGap:
      log_.Info("kv events: gap|" + t.spec.key.ToString(),
                "kv events: {} gap in the stream ({} after {}): resync", t.spec.key.ToString(), seq,
                *t.seq.last());
      counters_.gaps.fetch_add(1, std::memory_order_relaxed);
      applier_.Clear(t, t.ref());
      break;
  }
  if (!applier_.Apply(t, t.ref(), seq, payload)) applier_.Clear(t, t.ref());
}

void NatsEventSource::Hold(const std::string& subject, uint64_t seq, uint64_t stream_seq,
                           std::span<const uint8_t> payload) {
  std::deque<Held>& held = pending_[subject];
  if (seq == 0) {  // a restarted engine: what came before is cleared anyway
    for (const Held& h : held) pending_bytes_ -= h.payload.size();
    held.clear();
  }
  if (pending_bytes_ + payload.size() > options_.max_pending_bytes) {
    counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    return;  // the target's first batch held later is then not its stream start
  }
  held.push_back({seq, stream_seq,
                  std::string(reinterpret_cast<const char*>(payload.data()), payload.size())});
  pending_bytes_ += payload.size();
}

core::TargetId NatsEventSource::AddTarget(const IngestTarget& target) {
  IngestTarget spec = target;
  if (spec.block_size == 0) spec.block_size = 16;
  const std::string subject = KvEventSubject(spec.key);
  for (;;) {  // replacing a target removes it from the index: not while the staging builds
    {
      base::MutexLock lock(mu_);
      auto it = targets_.find(subject);
      if (it == targets_.end() || it->second->spec == spec || !building_.load()) break;
    }
    WaitForBuild();
  }
  base::MutexLock lock(mu_);
  auto it = targets_.find(subject);
  if (it != targets_.end()) {
    if (it->second->spec == spec) return it->second->id;
    WriterLock index_lock(index_mu_);
    it->second->alive = false;
    index_.RemoveTarget(it->second->id);
    targets_.erase(it);
  }
  auto t = std::make_unique<Target>();
  t->spec = spec;
  {
    WriterLock index_lock(index_mu_);
    t->id = index_.AddTarget(spec.key, spec.block_size);  // a restored key: its record's id
    index_.SetMaxBlocks(t->id, spec.max_blocks);
    ClaimRestored(*t);
  }
  Target& added = *t;
  targets_[subject] = std::move(t);
  auto held = pending_.find(subject);
  if (held != pending_.end()) {
    for (const Held& h : held->second) {
      Handle(added, h.seq, h.stream_seq,
             std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(h.payload.data()),
                                      h.payload.size()));
      pending_bytes_ -= h.payload.size();
    }
    pending_.erase(held);
  }
  return added.id;
}

void NatsEventSource::RemoveTarget(const core::TargetKey& key) {
  WaitForBuild();  // an id freed while the staging index builds would differ there
  base::MutexLock lock(mu_);
  auto it = targets_.find(KvEventSubject(key));
  if (it == targets_.end()) return;
  {
    WriterLock index_lock(index_mu_);
    it->second->alive = false;
    index_.RemoveTarget(it->second->id);
  }
  targets_.erase(it);
}

std::optional<core::TargetId> NatsEventSource::FindTarget(const core::TargetKey& key) const {
  base::MutexLock lock(mu_);
  auto it = targets_.find(KvEventSubject(key));
  if (it == targets_.end()) return std::nullopt;
  return it->second->id;
}

}  // namespace infera::events
