#include "engine_events/nats_relay.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <chrono>
#include <deque>
#include <optional>
#include <random>
#include <zmq.hpp>

#include "engine_events/event_encoder.h"
#include "event_wire/nats_subject.h"
#include "event_wire/zmq_frames.h"

namespace infera::events {
namespace {

struct Batch {
  uint64_t seq;
  uint64_t epoch;
  std::string payload;
};

// The relay's clear marker (doc/nats-transport.md §1): seq 0 with one AllBlocksCleared,
// for a restarted engine whose buffer does not start at 0 (an idle one's is empty).
std::string ClearMarkerPayload() {
  return EncodeEventBatch(EventBatch{.events = {AllCleared{}}}, WireShape::kVllm);
}

constexpr int kMaxProbes = 5;  // per reconnect; retried after 1, 2, 4, 8 s

uint64_t InstanceId() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

struct NatsRelay::Target {
  RelayTarget spec;
  std::string subject;
  MonitoredSub zmq;
  bool disconnected = false;           // the SUB lost its engine since the last message
  std::optional<uint64_t> last_seen;   // the last engine seq queued
  std::optional<uint64_t> last_hash;   // XXH3 of its payload (none: L from JetStream)
  std::optional<uint64_t> last_acked;  // the last one JetStream acknowledged
  bool checked = false;                // the stream's position was read since start
  bool replayed_nothing = false;       // the start check found nothing newer than L
  bool first_live = true;              // no live message since the start check
  uint64_t epoch = 0;                  // bumped at each engine restart (Nats-Msg-Id)
  bool after_marker = false;           // a clear marker was the last batch queued
  bool probe_due = false;              // reconnected: ask the replay socket (probe)
  int probe_failures = 0;              // in a row since the reconnect
  std::chrono::steady_clock::time_point probe_at{};
  std::deque<Batch> queue;             // not yet acknowledged, in engine order
};

NatsRelay::NatsRelay(std::vector<RelayTarget> targets, NatsRelayOptions options)
    : specs_(std::move(targets)), options_(std::move(options)) {}

NatsRelay::~NatsRelay() { Stop(); }

absl::Status NatsRelay::Start() {
  NatsOptions nats = options_.nats;
  nats.on_reconnect = [this] { reconnected_.store(true); };
  absl::StatusOr<std::unique_ptr<NatsConnection>> nc = NatsConnection::Connect(std::move(nats));
  if (!nc.ok()) return nc.status();
  nc_ = *std::move(nc);
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void NatsRelay::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  nc_.reset();
}

void NatsRelay::Run() {
  zmq::context_t ctx(1);
  const uint64_t instance = InstanceId();
  std::vector<std::unique_ptr<Target>> targets;
  for (const RelayTarget& spec : specs_) {
    auto t = std::make_unique<Target>();
    t->spec = spec;
    t->subject = KvEventSubject(spec.key);
    t->zmq = OpenMonitoredSub(ctx, spec.events_endpoint,
                              {.topic = spec.topic, .reconnect_ivl_max_ms = 2000});
    targets.push_back(std::move(t));
  }

  // Everything the engine's replay socket still has from `from` on, in order.
  auto replay = [&](Target& t, uint64_t from, std::vector<Batch>& out) {
    if (t.spec.replay_endpoint.empty()) return false;
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(t.spec.replay_endpoint);
    const std::string start = BE64(from);
    if (!dealer.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
        !dealer.send(zmq::buffer(start), zmq::send_flags::dontwait)) {
      return false;
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.replay_timeout_ms);
    while (!stop_.load()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, left);
      while (true) {
        std::vector<zmq::message_t> frames = RecvMultipart(dealer);
        if (frames.empty()) break;
        if (frames.size() != 3 || frames[0].size() != 0 || frames[1].size() != 8) return false;
        const uint64_t seq = ReadBE64(frames[1]);
        if (seq == kReplayEndMarker) {
          counters_.replayed.fetch_add(out.size(), std::memory_order_relaxed);
          return true;
        }
        if (seq >= from) out.push_back({seq, t.epoch, frames[2].to_string()});
      }
    }
    counters_.replay_failures.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("kv relay: {} replay from {} at {} failed", t.spec.key.ToString(), from,
                 t.spec.replay_endpoint);
    return false;
  };

  auto enqueue = [&](Target& t, Batch b) {
    if (t.queue.size() >= options_.max_queued) {
      t.queue.pop_front();
      counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    }
    t.last_seen = b.seq;
    t.last_hash = XXH3_64bits(b.payload.data(), b.payload.size());
    t.queue.push_back(std::move(b));
  };

  // `got`, a replay from last_seen, starts with the batch relayed last (by its seq alone
  // when last_seen is JetStream's L: its payload was not read).
  auto holds_last = [&](const Target& t, const std::vector<Batch>& got) {
    return !got.empty() && got.front().seq == *t.last_seen &&
           (!t.last_hash ||
            XXH3_64bits(got.front().payload.data(), got.front().payload.size()) == *t.last_hash);
  };
  // After a reconnect: whether the engine's replay buffer still holds, at last_seen, the
  // batch relayed last (the same engine, not a restarted one). No replay socket, or no
  // answer: judged the same, as before replay verification existed.
  auto same_engine = [&](Target& t) {
    if (t.spec.replay_endpoint.empty()) return true;
    std::vector<Batch> got;
    if (!replay(t, *t.last_seen, got)) return true;
    return holds_last(t, got);
  };

  // A new engine epoch whose buffer is resent from 0: the router drops what it already
  // has, or sees seq 0 and rebuilds. A buffer that does not start at 0 (empty: a
  // restarted engine that published nothing yet; or a replay that failed) goes out
  // behind a clear marker, so the router clears its view all the same.
  auto restart = [&](Target& t, const std::string& why) {
    spdlog::info("kv relay: {} {}: resending from 0", t.spec.key.ToString(), why);
    counters_.restarts.fetch_add(1, std::memory_order_relaxed);
    ++t.epoch;
    t.last_seen.reset();
    t.replayed_nothing = false;  // the start check's verdict is stale now
    std::vector<Batch> got;
    replay(t, 0, got);
    if (got.empty() || got.front().seq != 0) {
      enqueue(t, {0, t.epoch, ClearMarkerPayload()});
      ++t.epoch;  // the engine's own seq 0 must not take the marker's Nats-Msg-Id
      t.last_seen.reset();
      t.after_marker = got.empty();
    }
    for (Batch& b : got) enqueue(t, std::move(b));
  };

  // After the SUB reconnected to its engine, before any live batch: whether the engine's
  // buffer still holds the batch relayed last. It does: the batches after it (sent while
  // the SUB was away) are queued. It does not: the engine restarted (restart above),
  // noticed even when it publishes nothing more. False: no answer, ask again later.
  auto probe = [&](Target& t) {
    std::vector<Batch> got;
    if (!replay(t, *t.last_seen, got)) return false;
    t.disconnected = false;
    if (!holds_last(t, got)) {
      restart(t, fmt::format("reconnected to an engine whose buffer does not hold seq {} as "
                             "relayed ({} batches from it)",
                             *t.last_seen, got.size()));
      return true;
    }
    for (Batch& b : got) {
      if (b.seq > *t.last_seen) enqueue(t, std::move(b));
    }
    return true;
  };

  // After start or a reconnect: what JetStream holds for the subject; resend from the
  // engine's buffer what it misses. False: ask again later.
  auto check = [&](Target& t) {
    absl::StatusOr<std::optional<uint64_t>> last = nc_->LastEngineSeq(t.subject);
    if (!last.ok()) {
      spdlog::debug("kv relay: {}", last.status().ToString());
      return false;
    }
    const std::optional<uint64_t> l = *last;
    const bool missing = !t.checked || (t.last_acked && (!l || *t.last_acked > *l));
    if (missing) {
      const uint64_t from = l ? *l + 1 : 0;
      std::vector<Batch> got;
      if (replay(t, from, got)) {
        std::deque<Batch> rest;
        const uint64_t upto = got.empty() ? 0 : got.back().seq;
        for (Batch& b : t.queue) {
          if (got.empty() || b.seq > upto || b.epoch != t.epoch) rest.push_back(std::move(b));
        }
        t.queue.clear();
        for (Batch& b : got) enqueue(t, std::move(b));
        for (Batch& b : rest) t.queue.push_back(std::move(b));
        if (!got.empty() && (!t.last_seen || *t.last_seen < upto)) t.last_seen = upto;
        if (!t.checked) {
          t.replayed_nothing = got.empty();
          if (got.empty() && l && !t.last_seen) {
            t.last_seen = l;
            t.last_hash.reset();
          }
        }
        spdlog::info("kv relay: {} JetStream holds up to seq {}; resent {} from the replay socket",
                     t.spec.key.ToString(), l ? std::to_string(*l) : "none", got.size());
        // Nothing newer than L: an engine that restarted while the relay was away and
        // published nothing since is noticed now, not at its next batch (probe above).
        if (!t.checked && got.empty() && l && t.last_seen == l) probe(t);
      } else if (!t.checked && l && !t.last_seen) {
        t.last_seen = l;
        t.last_hash.reset();
        // No answer (the engine is down, or restarting): judged as after a reconnect,
        // probed when the SUB connects (an idle restarted engine sends nothing).
        t.disconnected = true;
      }
    }
    if (!t.checked) t.first_live = true;
    t.checked = true;
    return true;
  };

  auto on_live = [&](Target& t, uint64_t seq, std::string payload) {
    counters_.received.fetch_add(1, std::memory_order_relaxed);
    const bool first = t.first_live;
    t.first_live = false;
    auto resend_from_zero = [&](const char* why) {
      restart(t, fmt::format("{} (seq {} after {})", why, seq, *t.last_seen));
    };
    const bool reconnected = t.disconnected;
    t.disconnected = false;
    if (reconnected && t.last_seen && seq != *t.last_seen + 1) {
      // The stream does not go on where it stopped: the engine restarted (its first
      // batches went by before the SUB reconnected) or batches were lost.
      resend_from_zero("reconnected to a stream that does not continue");
    } else if (reconnected && t.last_seen && !same_engine(t)) {
      // The seq continues, but a restarted engine can reach it too (its first
      // last_seen + 1 batches went by before the SUB reconnected): its buffer's batch at
      // last_seen is not the one relayed.
      resend_from_zero("reconnected to an engine whose buffer differs");
    } else if (first && t.replayed_nothing && t.last_seen && seq != 0 && seq <= *t.last_seen) {
      // JetStream is ahead of this engine: it restarted while the relay was away.
      resend_from_zero("engine restarted while the relay was away");
    } else if (seq == 0 && t.last_seen) {
      counters_.restarts.fetch_add(1, std::memory_order_relaxed);
      ++t.epoch;
      t.last_seen.reset();
    }
    if (t.after_marker && !t.last_seen && seq > 0) {
      // After a clear marker the stream restarts at 0: the engine's first batches went
      // by before the SUB's subscription reached its engine.
      counters_.gaps.fetch_add(1, std::memory_order_relaxed);
      std::vector<Batch> got;
      replay(t, 0, got);
      for (Batch& b : got) {
        if (b.seq < seq) enqueue(t, std::move(b));
      }
    }
    t.after_marker = false;
    if (t.last_seen && seq <= *t.last_seen) {
      counters_.dropped.fetch_add(1, std::memory_order_relaxed);  // the replay had it
      return;
    }
    if (t.last_seen && seq > *t.last_seen + 1) {
      counters_.gaps.fetch_add(1, std::memory_order_relaxed);
      std::vector<Batch> got;
      replay(t, *t.last_seen + 1, got);
      for (Batch& b : got) {
        if (b.seq > *t.last_seen && b.seq < seq) enqueue(t, std::move(b));
      }
    }
    enqueue(t, {seq, t.epoch, std::move(payload)});
  };

  // Publishes queued batches in order while NATS takes them. False: stop for now.
  auto flush = [&](Target& t) {
    while (!t.queue.empty() && !stop_.load()) {
      if (!nc_->connected()) return false;
      const Batch& b = t.queue.front();
      natsMsg* msg = nullptr;
      natsStatus s = natsMsg_Create(&msg, t.subject.c_str(), nullptr, b.payload.data(),
                                    static_cast<int>(b.payload.size()));
      const std::string seq = std::to_string(b.seq);
      const std::string header(kNatsSeqHeader);
      if (s == NATS_OK) s = natsMsgHeader_Set(msg, header.c_str(), seq.c_str());
      const std::string id = std::to_string(instance) + "." + std::to_string(b.epoch) + "." +
                             std::to_string(t.spec.key.dp_rank) + "." + seq;
      jsPubOptions po;
      jsPubOptions_Init(&po);
      po.MsgId = id.c_str();
      po.MaxWait = nc_->request_timeout_ms();
      jsPubAck* ack = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      if (s == NATS_OK) s = js_PublishMsg(&ack, nc_->js(), msg, &po, &jerr);
      natsMsg_Destroy(msg);
      if (ack != nullptr) jsPubAck_Destroy(ack);
      if (s != NATS_OK) {
        counters_.publish_failures.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("kv relay: {}", NatsError("publish " + t.subject, s, jerr).ToString());
        if (jerr == JSStreamNotFoundErr) reconnected_.store(true);  // make it again
        return false;
      }
      counters_.published.fetch_add(1, std::memory_order_relaxed);
      t.last_acked = b.seq;
      t.queue.pop_front();
    }
    return true;
  };

  std::vector<zmq::pollitem_t> items;
  while (!stop_.load()) {
    if (reconnected_.load() && nc_->connected()) {
      bool all = nc_->EnsureStream(options_.limits).ok();
      for (auto& t : targets) all = all && check(*t);
      if (all) reconnected_.store(false);
    }
    items.clear();
    for (auto& t : targets) {
      // The monitor first: a disconnect must be known before the messages after it.
      items.push_back({t->zmq.monitor->handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({t->zmq.sub->handle(), 0, ZMQ_POLLIN, 0});
    }
    zmq::poll(items, std::chrono::milliseconds(options_.poll_interval_ms));
    for (size_t i = 0; i < targets.size(); ++i) {
      Target& t = *targets[i];
      if (items[2 * i].revents & ZMQ_POLLIN) {
        const MonitorEvents e = ReadMonitor(*t.zmq.monitor);
        if (e.disconnected && !t.disconnected) {
          spdlog::info("kv relay: {} lost its engine's event stream (seq {} last relayed)",
                       t.spec.key.ToString(), t.last_seen ? std::to_string(*t.last_seen) : "none");
        }
        t.disconnected = t.disconnected || e.disconnected;
        if (e.connected && t.disconnected) {
          spdlog::info("kv relay: {} reconnected to its engine's event stream",
                       t.spec.key.ToString());
          t.probe_due = t.last_seen && !t.spec.replay_endpoint.empty();
          t.probe_failures = 0;
          t.probe_at = std::chrono::steady_clock::now();
        }
      }
      if (!(items[2 * i + 1].revents & ZMQ_POLLIN)) continue;
      for (int n = 0; n < 256; ++n) {
        std::vector<zmq::message_t> frames = RecvMultipart(*t.zmq.sub);
        if (frames.empty()) break;
        if (frames.size() != 3 || frames[1].size() != 8) {
          counters_.dropped.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        on_live(t, ReadBE64(frames[1]), frames[2].to_string());
      }
    }
    for (auto& t : targets) {
      // A live batch after the reconnect was judged by on_live already.
      if (!t->probe_due || !t->disconnected || !t->last_seen) {
        t->probe_due = false;
        continue;
      }
      if (std::chrono::steady_clock::now() < t->probe_at) continue;
      // A probe blocks this thread up to replay_timeout_ms: after kMaxProbes without an
      // answer the next live batch decides, as before probes.
      if (probe(*t) || ++t->probe_failures >= kMaxProbes) {
        t->probe_due = false;
      } else {
        t->probe_at = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(1000 << (t->probe_failures - 1));
      }
    }
    if (!reconnected_.load()) {
      for (auto& t : targets) {
        if (!flush(*t)) break;
      }
    }
  }
}

}  // namespace infera::events
