// scale_fleet: a fleet of simulated engines publishing KV events to a real
// infera-router (doc/perf-scale.md). One process simulates a shard of the fleet's
// targets (one target = one worker's data-parallel rank); each target has a ZMQ PUB
// socket and a replay ROUTER socket exactly as vLLM's ZmqEventPublisher (doc/kv-events.md
// §1: frames [topic, seq 8B BE, msgpack payload]; replay [empty, seq, payload] ... end
// marker), payloads in vLLM's map shape (events::EncodeEventBatch, the encoder the
// mock engine's publisher uses).
//
// Worker w (w = 0 .. workers-1) has `dp` ranks; rank r publishes on
// tcp://127.0.0.1:(port_base + w * 2 * dp + r) and serves replay on
// (port_base + w * 2 * dp + dp + r). This process serves the workers with
// w % shards == shard (a 20,000-descriptor limit fits ~3,000 targets per process).
//
// Each target models an engine's prefix cache: conversations (chains of blocks), a
// batch stores `batch_blocks` blocks in 4 events (new conversations or continuations
// of recent ones), and once the target holds `view_blocks` blocks every batch also
// evicts as many blocks, tail first from the least recently extended conversation
// (vLLM's leaf-first LRU). Block tokens: 16 ids below 32,000 (3 bytes each on the wire).
//
// Commands on stdin, one per line (answers on stdout):
//   fill [<blocks_per_s>] store until every target holds view_blocks, at most that
//                         fast when given (0 or absent: as fast as possible) -> "filled <s>"
//   churn <seconds> <blocks_per_s>   stores + evictions at that rate (0: as fast as
//                         possible) for that long                     -> "churned <s>"
//   quit
// While publishing it prints "p <monotonic s> <blocks>" every 10 ms: blocks published
// (stored + removed) so far by this process, so a driver can compute view lag from the
// router's applied counters (CLOCK_MONOTONIC, the clock of Python's time.monotonic()).
// A background thread serves replay requests from each target's last `replay_batches`
// payloads (oldest first, then the end marker).
//
// Usage: scale_fleet --workers W --dp D --port-base P [--shard i --shards K]
//                    [--view-blocks N] [--batch-blocks B] [--replay-batches R] [--seed S]
#include <sys/epoll.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <initializer_list>
#include <thread>
#include <vector>

#include "engine_events/event_encoder.h"

namespace {

using infera::events::EncodeEventBatch;
using infera::events::EventBatch;
using infera::events::Removed;
using infera::events::Stored;
using infera::events::WireShape;

constexpr uint32_t kBlock = 16;
constexpr char kTopic[] = "kv-events";

double Now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Options {
  int workers = 64;
  int dp = 8;
  int port_base = 0;
  int shard = 0;
  int shards = 1;
  size_t view_blocks = 2048;
  size_t batch_blocks = 32;
  size_t replay_batches = 64;
  uint64_t seed = 1;
};

struct Target {
  void* pub = nullptr;
  void* replay = nullptr;
  uint64_t seq = 0;
  uint64_t next_hash = 0;
  std::deque<std::vector<uint64_t>> convs;  // oldest-extended first
  size_t held = 0;
  std::mutex mu;  // guards buffer (the replay thread reads it)
  std::deque<std::pair<uint64_t, std::shared_ptr<const std::string>>> buffer;
};

// Sends one multipart message.
void SendFrames(void* sock, std::initializer_list<std::string_view> frames) {
  size_t i = 0;
  for (std::string_view f : frames) {
    zmq_send(sock, f.data(), f.size(), ++i < frames.size() ? ZMQ_SNDMORE : 0);
  }
}

std::string BE64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (56 - 8 * i));
  return s;
}

class Fleet {
 public:
  explicit Fleet(const Options& o) : o_(o), rng_(o.seed * 7919 + o.shard) {
    ctx_ = zmq_ctx_new();
    zmq_ctx_set(ctx_, ZMQ_IO_THREADS, 1);
    zmq_ctx_set(ctx_, ZMQ_MAX_SOCKETS, 65536);
    for (int w = o.shard; w < o.workers; w += o.shards) {
      for (int r = 0; r < o.dp; ++r) {
        auto t = std::make_unique<Target>();
        const int port = o.port_base + w * 2 * o.dp + r;
        t->pub = Bind(ZMQ_PUB, port);
        t->replay = Bind(ZMQ_ROUTER, port + o.dp);
        t->next_hash = (static_cast<uint64_t>(w * o.dp + r + 1) << 40) + 1;
        targets_.push_back(std::move(t));
      }
    }
    for (uint32_t& tok : token_pool_) tok = static_cast<uint32_t>(rng_() % 32000);
    replay_thread_ = std::thread([this] { ServeReplays(); });
  }

  ~Fleet() {
    stop_.store(true);
    replay_thread_.join();
    for (auto& t : targets_) {
      zmq_close(t->pub);
      zmq_close(t->replay);
    }
    zmq_ctx_term(ctx_);
  }

  size_t targets() const { return targets_.size(); }

  // One batch of target t: `stores` blocks stored, and as many evicted as it takes
  // to stay at view_blocks. Returns blocks stored + removed.
  size_t Step(Target& t, size_t stores) {
    EventBatch batch;
    batch.ts = 0;
    size_t moved = 0;
    const size_t per_event = std::max<size_t>(1, stores / 4);
    for (size_t left = stores; left > 0;) {
      const size_t n = std::min(per_event, left);
      left -= n;
      Stored s;
      s.block_size = kBlock;
      s.medium = "GPU";
      const bool extend = !t.convs.empty() && rng_() % 10 < 6;
      std::vector<uint64_t>* conv;
      if (extend) {
        // A recent conversation goes on: it becomes the most recently extended.
        const size_t back = std::min<size_t>(t.convs.size(), 8);
        const size_t i = t.convs.size() - 1 - rng_() % back;
        std::vector<uint64_t> c = std::move(t.convs[i]);
        t.convs.erase(t.convs.begin() + static_cast<ptrdiff_t>(i));
        t.convs.push_back(std::move(c));
        conv = &t.convs.back();
        s.parent = conv->back();
      } else {
        t.convs.emplace_back();
        conv = &t.convs.back();
      }
      s.token_ids.resize(n * kBlock);
      const size_t off = rng_() % (token_pool_.size() - n * kBlock);
      std::copy_n(token_pool_.begin() + static_cast<ptrdiff_t>(off), n * kBlock,
                  s.token_ids.begin());
      if (!s.parent) s.token_ids[0] = static_cast<uint32_t>(t.next_hash & 0x3fffffff);
      for (size_t i = 0; i < n; ++i) {
        s.engine_hashes.push_back(t.next_hash);
        conv->push_back(t.next_hash++);
      }
      t.held += n;
      moved += n;
      batch.events.emplace_back(std::move(s));
    }
    while (t.held > o_.view_blocks) {
      std::vector<uint64_t>& oldest = t.convs.front();
      const size_t n = std::min(oldest.size(), t.held - o_.view_blocks);
      Removed r;
      r.medium = "GPU";
      r.engine_hashes.assign(oldest.end() - static_cast<ptrdiff_t>(n), oldest.end());
      oldest.resize(oldest.size() - n);
      if (oldest.empty()) t.convs.pop_front();
      t.held -= n;
      moved += n;
      batch.events.emplace_back(std::move(r));
    }
    auto payload = std::make_shared<const std::string>(EncodeEventBatch(batch, WireShape::kVllm));
    const uint64_t seq = t.seq++;
    SendFrames(t.pub, {kTopic, BE64(seq), *payload});
    std::lock_guard<std::mutex> lock(t.mu);
    t.buffer.emplace_back(seq, std::move(payload));
    while (t.buffer.size() > o_.replay_batches) t.buffer.pop_front();
    return moved;
  }

  // Publishes until `done()` (checked per round over the targets), at most `rate`
  // blocks/s (0: unpaced); prints progress. Returns blocks published.
  template <class Done>
  size_t Run(double rate, bool fill, Done done) {
    const double t0 = Now();
    double next_print = t0;
    size_t moved = 0;
    while (!done(moved)) {
      bool any = false;
      for (auto& t : targets_) {
        if (fill && t->held >= o_.view_blocks) continue;
        any = true;
        const size_t stores =
            fill ? std::min(o_.batch_blocks, o_.view_blocks - t->held) : o_.batch_blocks;
        moved += Step(*t, stores);
        const double now = Now();
        if (now >= next_print) {
          std::printf("p %.6f %zu\n", now, published_ + moved);
          std::fflush(stdout);
          next_print = now + 0.01;
        }
        if (rate > 0) {
          // Paced: never ahead of the schedule by more than one batch.
          const double due = t0 + static_cast<double>(moved) / rate;
          while (Now() < due) std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      }
      if (fill && !any) break;
    }
    published_ += moved;
    std::printf("p %.6f %zu\n", Now(), published_);
    return moved;
  }

 private:
  void* Bind(int type, int port) {
    void* s = zmq_socket(ctx_, type);
    int hwm = 100000;  // vLLM's SNDHWM
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    const std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
    if (zmq_bind(s, ep.c_str()) != 0) {
      std::fprintf(stderr, "scale_fleet: cannot bind %s: %s\n", ep.c_str(),
                   zmq_strerror(zmq_errno()));
      std::exit(3);
    }
    return s;
  }

  static bool Readable(void* socket) {
    int events = 0;
    size_t len = sizeof events;
    return zmq_getsockopt(socket, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN) != 0;
  }

  // Waits with epoll on each replay ROUTER's ZMQ_FD, so a wakeup costs O(sockets with a
  // request), not O(targets): zmq_poll over a shard's 2,048 sockets at every wakeup made
  // this process, not the router, the bound of a restart's 4,104 verify replays (a real
  // engine serves its own socket). ZMQ_FD is edge-like: a socket still readable after a
  // request is served is served again in the next round without waiting.
  void ServeReplays() {
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    std::vector<size_t> ready, next;
    for (size_t i = 0; i < targets_.size(); ++i) {
      int fd = -1;
      size_t len = sizeof fd;
      zmq_getsockopt(targets_[i]->replay, ZMQ_FD, &fd, &len);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
      ready.push_back(i);
    }
    std::vector<epoll_event> events(256);
    while (!stop_.load()) {
      const int n =
          epoll_wait(ep, events.data(), static_cast<int>(events.size()), ready.empty() ? 20 : 0);
      for (int k = 0; k < n; ++k) ready.push_back(events[static_cast<size_t>(k)].data.u64);
      std::sort(ready.begin(), ready.end());
      ready.erase(std::unique(ready.begin(), ready.end()), ready.end());
      next.clear();
      for (size_t i : ready) {
        Target& t = *targets_[i];
        if (!Readable(t.replay)) continue;
        ServeReplay(t);
        if (Readable(t.replay)) next.push_back(i);
      }
      ready.swap(next);
    }
    close(ep);
  }

  // Answers one request: [identity, empty, start_seq].
  void ServeReplay(Target& t) {
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, t.replay, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        break;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
      more = zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    if (frames.size() != 3 || frames[2].size() != 8) return;
    uint64_t from = 0;
    for (unsigned char c : frames[2]) from = from << 8 | c;
    std::vector<std::pair<uint64_t, std::shared_ptr<const std::string>>> copy;
    {
      std::lock_guard<std::mutex> lock(t.mu);
      for (const auto& b : t.buffer) {
        if (b.first >= from) copy.push_back(b);
      }
    }
    for (const auto& [seq, payload] : copy) {
      SendFrames(t.replay, {frames[0], "", BE64(seq), *payload});
    }
    SendFrames(t.replay, {frames[0], "", BE64(~uint64_t{0}), ""});
  }

  Options o_;
  std::mt19937_64 rng_;
  void* ctx_ = nullptr;
  std::vector<std::unique_ptr<Target>> targets_;
  std::vector<uint32_t> token_pool_ = std::vector<uint32_t>(1 << 16);
  std::thread replay_thread_;
  std::atomic<bool> stop_{false};
  size_t published_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--workers") {
      o.workers = std::atoi(v);
    } else if (k == "--dp") {
      o.dp = std::atoi(v);
    } else if (k == "--port-base") {
      o.port_base = std::atoi(v);
    } else if (k == "--shard") {
      o.shard = std::atoi(v);
    } else if (k == "--shards") {
      o.shards = std::atoi(v);
    } else if (k == "--view-blocks") {
      o.view_blocks = std::strtoull(v, nullptr, 10);
    } else if (k == "--batch-blocks") {
      o.batch_blocks = std::strtoull(v, nullptr, 10);
    } else if (k == "--replay-batches") {
      o.replay_batches = std::strtoull(v, nullptr, 10);
    } else if (k == "--seed") {
      o.seed = std::strtoull(v, nullptr, 10);
    } else {
      std::fprintf(stderr, "scale_fleet: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (o.port_base <= 0 || o.workers <= 0 || o.dp <= 0 || o.shards <= 0 || o.shard < 0 ||
      o.shard >= o.shards || o.batch_blocks == 0 || o.view_blocks == 0 ||
      o.port_base + o.workers * 2 * o.dp > 65535) {
    std::fprintf(stderr,
                 "usage: scale_fleet --workers W --dp D --port-base P [--shard i --shards K] "
                 "[--view-blocks N] [--batch-blocks B] [--replay-batches R] [--seed S]\n");
    return 2;
  }
  Fleet fleet(o);
  std::printf("ready %zu targets\n", fleet.targets());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "fill" || line.rfind("fill ", 0) == 0) {
      double rate = 0;
      if (line != "fill" && std::sscanf(line.c_str(), "fill %lf", &rate) != 1) continue;
      const double t0 = Now();
      fleet.Run(rate, /*fill=*/true, [](size_t) { return false; });
      std::printf("filled %.3f\n", Now() - t0);
    } else if (line.rfind("churn ", 0) == 0) {
      double seconds = 0, rate = 0;
      if (std::sscanf(line.c_str(), "churn %lf %lf", &seconds, &rate) != 2) continue;
      const double t0 = Now();
      fleet.Run(rate, /*fill=*/false, [&](size_t) { return Now() - t0 >= seconds; });
      std::printf("churned %.3f\n", Now() - t0);
    } else if (line == "quit") {
      break;
    }
    std::fflush(stdout);
  }
  return 0;
}
