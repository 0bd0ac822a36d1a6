#include "engine_runner.h"

#include <chrono>
#include <cstdlib>

#include "core/clock.h"
#include "event_wire/dp_endpoint.h"

namespace infera::mock {
namespace {

std::optional<std::string> Medium(core::Tier tier) {
  switch (tier) {
    case core::Tier::kDevice:
      return "GPU";
    case core::Tier::kHost:
      return "CPU";
    case core::Tier::kDisk:
      return "DISK";
  }
  return "GPU";
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct EngineRunner::Rank {
  uint32_t index = 0;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::unique_ptr<sim::Engine> engine;                // guarded by mu
  absl::flat_hash_map<uint64_t, OutputFn> callbacks;  // guarded by mu
  bool stop = false;                                  // guarded by mu
  std::unique_ptr<events::EventPublisher> publisher;
  core::Random rng{1};     // fault injection; used only by the rank's thread
  bool held_back = false;  // reorder: the previous batch was held back
  std::atomic<uint64_t> batches{0}, dropped{0}, reordered{0}, tokens_out{0};
  std::atomic<uint64_t> prefix_queries{0}, prefix_hits{0}, finished{0};
  std::thread thread;
};

EngineRunner::EngineRunner(const RunnerOptions& options)
    : options_(options),
      token_mask_(options.kv_events_hash_seed == 0
                      ? 0
                      : static_cast<uint32_t>(core::Random(options.kv_events_hash_seed).Next()) |
                            1u) {}

namespace {

// "tcp://host:0" (or ":*"): the OS picks the port.
bool AnyPort(const std::string& endpoint) {
  return endpoint.rfind("tcp://", 0) == 0 && (endpoint.ends_with(":0") || endpoint.ends_with(":*"));
}

// The endpoint with its port replaced (REQUIRES: a tcp endpoint with a port).
std::string WithPort(const std::string& endpoint, uint32_t port) {
  return endpoint.substr(0, endpoint.rfind(':') + 1) + std::to_string(port);
}

uint32_t BoundPort(const std::string& bound) {
  return static_cast<uint32_t>(std::strtoul(bound.c_str() + bound.rfind(':') + 1, nullptr, 10));
}

}  // namespace

// One publisher per rank, rank r on the configured ports + r (events and replay).
// With an OS-picked port and several ranks, rank 0 takes what the OS gives (P) and
// rank r binds P + r; when one of those is taken, every socket is closed and a new
// P is tried, so the ranks always sit on consecutive ports as a router derives them.
// A failed attempt's sockets stay bound until the next attempt has bound its own, so
// the OS cannot hand out the same P (with P + r still taken) attempt after attempt.
absl::StatusOr<std::vector<std::unique_ptr<events::EventPublisher>>> EngineRunner::RankPublishers(
    const RunnerOptions& options) {
  const bool pick_events = options.dp_size > 1 && AnyPort(options.events_endpoint);
  const bool pick_replay = options.dp_size > 1 && AnyPort(options.replay_endpoint);
  constexpr int kAttempts = 50;
  absl::Status last;
  std::vector<std::unique_ptr<events::EventPublisher>> failed;  // the previous attempt's
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::vector<std::unique_ptr<events::EventPublisher>> out;
    for (uint32_t r = 0; r < options.dp_size; ++r) {
      events::PublisherOptions po;
      po.pub_endpoint =
          r > 0 && pick_events
              ? WithPort(options.events_endpoint, BoundPort(out[0]->pub_endpoint()) + r)
              : events::OffsetEndpointPort(options.events_endpoint, r);
      if (!options.replay_endpoint.empty()) {
        po.replay_endpoint =
            r > 0 && pick_replay
                ? WithPort(options.replay_endpoint, BoundPort(out[0]->replay_endpoint()) + r)
                : events::OffsetEndpointPort(options.replay_endpoint, r);
      }
      po.topic = options.topic;
      po.shape = options.shape;
      absl::StatusOr<std::unique_ptr<events::EventPublisher>> pub =
          events::EventPublisher::Create(po);
      if (!pub.ok()) {
        last = pub.status();
        break;
      }
      out.push_back(std::move(*pub));
    }
    if (out.size() == options.dp_size) return out;
    if (!pick_events && !pick_replay) break;  // fixed ports: trying again binds the same
    failed = std::move(out);
  }
  return last;
}

absl::StatusOr<std::unique_ptr<EngineRunner>> EngineRunner::Create(const RunnerOptions& options) {
  if (options.dp_size == 0 || options.dp_size > 64) {
    return absl::InvalidArgumentError("--dp-size must be in 1..64");
  }
  std::unique_ptr<EngineRunner> runner(new EngineRunner(options));
  absl::StatusOr<std::vector<std::unique_ptr<events::EventPublisher>>> publishers =
      RankPublishers(options);
  if (!publishers.ok()) return publishers.status();
  for (uint32_t r = 0; r < options.dp_size; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = r;
    rank->engine = std::make_unique<sim::Engine>(options.engine);
    rank->rng = core::Random(options.seed * 1000003 + r);
    rank->publisher = std::move((*publishers)[r]);
    runner->ranks_.push_back(std::move(rank));
  }
  for (auto& rank : runner->ranks_) {
    Rank* r = rank.get();
    r->thread = std::thread([runner = runner.get(), r] { runner->Loop(r); });
  }
  return runner;
}

EngineRunner::~EngineRunner() {
  for (auto& r : ranks_) {
    {
      std::lock_guard<std::mutex> lock(r->mu);
      r->stop = true;
    }
    r->cv.notify_all();
  }
  for (auto& r : ranks_) {
    if (r->thread.joinable()) r->thread.join();
  }
}

uint32_t EngineRunner::LeastLoadedRank() const {
  uint32_t best = 0;
  size_t best_load = SIZE_MAX;
  for (const auto& r : ranks_) {
    std::lock_guard<std::mutex> lock(r->mu);
    const size_t load = r->engine->NumRunning() + r->engine->NumWaiting();
    if (load < best_load) {
      best_load = load;
      best = r->index;
    }
  }
  return best;
}

size_t EngineRunner::CachedPrefixTokens(uint32_t rank_index, std::span<const core::TokenId> prompt,
                                        const sim::CacheKeys& keys) const {
  const Rank* r = ranks_.at(rank_index).get();
  std::lock_guard<std::mutex> lock(r->mu);
  return r->engine->CachedPrefixTokens(prompt, keys);
}

bool EngineRunner::Submit(uint32_t rank_index, std::vector<core::TokenId> prompt, size_t max_tokens,
                          OutputFn on_output, uint64_t* request_id, bool remote_prefill,
                          sim::CacheKeys keys) {
  Rank* r = ranks_.at(rank_index).get();
  const uint64_t id = next_id_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(r->mu);
    if (!r->engine->AddRequest(
            {id, std::move(prompt), max_tokens, remote_prefill, std::move(keys)})) {
      return false;
    }
    r->callbacks.emplace(id, std::move(on_output));
  }
  if (request_id) *request_id = id;
  submitted_.fetch_add(1);
  r->cv.notify_all();
  return true;
}

void EngineRunner::Abort(uint32_t rank_index, uint64_t request_id) {
  if (rank_index >= ranks_.size()) return;
  Rank* r = ranks_[rank_index].get();
  std::lock_guard<std::mutex> lock(r->mu);
  r->engine->Abort(request_id);
  r->callbacks.erase(request_id);
}

bool EngineRunner::ResetPrefixCache() {
  bool ok = true;
  for (auto& r : ranks_) {
    std::vector<sim::KvEvent> events;
    {
      std::lock_guard<std::mutex> lock(r->mu);
      if (!r->engine->ResetPrefixCache()) {
        ok = false;
        continue;
      }
      events = r->engine->TakeEvents();
      // Published under the lock so the clear cannot overtake a step's batch.
      Publish(r.get(), events);
    }
  }
  return ok;
}

void EngineRunner::Publish(Rank* r, const std::vector<sim::KvEvent>& evs) {
  if (evs.empty()) return;
  events::EventBatch batch;
  batch.ts = WallSeconds();
  if (ranks_.size() > 1) batch.dp_rank = r->index;
  for (const sim::KvEvent& e : evs) {
    switch (e.kind) {
      case sim::KvEvent::Kind::kBlockStored: {
        events::Stored s;
        s.engine_hashes.assign(e.block_hashes.begin(), e.block_hashes.end());
        s.parent = e.parent_hash;
        s.token_ids.assign(e.token_ids.begin(), e.token_ids.end());
        if (token_mask_ != 0) {
          for (auto& t : s.token_ids) t ^= token_mask_;
        }
        s.block_size = e.block_size;
        s.medium = Medium(e.medium);
        s.lora_id = e.lora_id;
        s.lora_name = e.lora_name;
        if (options_.kv_events_extra_keys && options_.shape != events::WireShape::kSglang) {
          s.extra_keys = e.extra_keys;
        }
        batch.events.emplace_back(std::move(s));
        break;
      }
      case sim::KvEvent::Kind::kBlockRemoved: {
        events::Removed s;
        s.engine_hashes.assign(e.block_hashes.begin(), e.block_hashes.end());
        s.medium = Medium(e.medium);
        batch.events.emplace_back(std::move(s));
        break;
      }
      case sim::KvEvent::Kind::kAllBlocksCleared:
        batch.events.emplace_back(events::AllCleared{});
        break;
    }
  }
  std::string payload = events::EncodeEventBatch(batch, options_.shape);
  r->batches.fetch_add(1);
  if (r->held_back) {
    // Reorder: this batch goes out first, then the one held back (its seq is older).
    const uint64_t held_seq = r->publisher->next_seq() - 1;
    r->publisher->PublishPayload(std::move(payload));
    r->publisher->ResendForTest(held_seq);
    r->held_back = false;
    return;
  }
  if (options_.drop_event_fraction > 0 && r->rng.UniformDouble() < options_.drop_event_fraction) {
    r->dropped.fetch_add(1);
    r->publisher->PublishPayloadSkippingLive(std::move(payload));
    return;
  }
  if (options_.reorder_event_fraction > 0 &&
      r->rng.UniformDouble() < options_.reorder_event_fraction) {
    r->reordered.fetch_add(1);
    r->held_back = true;
    r->publisher->PublishPayloadSkippingLive(std::move(payload));
    return;
  }
  r->publisher->PublishPayload(std::move(payload));
}

void EngineRunner::Loop(Rank* r) {
  while (true) {
    sim::StepResult step;
    std::vector<sim::KvEvent> evs;
    {
      std::unique_lock<std::mutex> lock(r->mu);
      r->cv.wait(lock, [&] { return r->stop || r->engine->HasWork(); });
      if (r->stop) return;
      step = r->engine->Step();
      evs = r->engine->TakeEvents();
    }
    if (options_.stall_after_requests > 0 && options_.stall_ms > 0 &&
        submitted_.load() >= options_.stall_after_requests && !stalled_once_.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.stall_ms));
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(step.duration_ns));
    {
      std::lock_guard<std::mutex> lock(r->mu);
      Publish(r, evs);
      for (const sim::TokenOutput& o : step.outputs) {
        r->tokens_out.fetch_add(1);
        if (o.index == 0) {
          r->prefix_queries.fetch_add(o.prompt_tokens);
          r->prefix_hits.fetch_add(o.cached_tokens);
        }
        auto it = r->callbacks.find(o.request_id);
        if (it == r->callbacks.end()) continue;  // aborted
        if (o.finished) {
          r->finished.fetch_add(1);
          OutputFn fn = std::move(it->second);
          r->callbacks.erase(it);
          fn(o);
        } else {
          it->second(o);
        }
      }
    }
  }
}

nlohmann::json EngineRunner::DebugDump() const {
  nlohmann::json out;
  out["dp_size"] = ranks_.size();
  out["block_size"] = options_.engine.block_size;
  out["ranks"] = nlohmann::json::array();
  for (const auto& r : ranks_) {
    std::vector<std::pair<core::BlockHash, core::BlockHash>> blocks;
    {
      std::lock_guard<std::mutex> lock(r->mu);
      blocks = r->engine->cache().CachedBlocks();
    }
    std::sort(blocks.begin(), blocks.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    nlohmann::json engine_hashes = nlohmann::json::array(), router_hashes = nlohmann::json::array();
    for (const auto& [e, rh] : blocks) {
      engine_hashes.push_back(e);
      router_hashes.push_back(rh);
    }
    out["ranks"].push_back({{"dp_rank", r->index},
                            {"block_count", blocks.size()},
                            {"engine_hashes", std::move(engine_hashes)},
                            {"router_hashes", std::move(router_hashes)}});
  }
  return out;
}

std::string EngineRunner::MetricsText(const std::string& model) const {
  std::string o;
  auto line = [&](const std::string& name, uint32_t rank, double v) {
    o += name + "{model_name=\"" + model + "\",engine=\"" + std::to_string(rank) + "\"} " +
         std::to_string(v) + "\n";
  };
  struct Series {
    const char* name;
    const char* type;
    const char* help;
  };
  const Series series[] = {
      {"vllm:num_requests_running", "gauge", "Requests in the running batch."},
      {"vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled."},
      {"vllm:gpu_cache_usage_perc", "gauge", "Fraction of KV blocks in use."},
      {"vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up."},
      {"vllm:prefix_cache_hits_total", "counter", "Prompt tokens served from the cache."},
      {"vllm:generation_tokens_total", "counter", "Generated tokens."},
      {"vllm:request_success_total", "counter", "Finished requests."},
      {"vllm:num_preemptions_total", "counter", "Preemptions."},
      {"infera_mock_kv_event_batches_total", "counter", "KV event batches published."},
      {"infera_mock_kv_event_batches_dropped_total", "counter", "Batches dropped (fault)."},
      {"infera_mock_kv_event_batches_reordered_total", "counter", "Batches reordered (fault)."},
      {"infera_mock_cached_blocks", "gauge", "Blocks in the prefix cache."},
  };
  for (size_t s = 0; s < std::size(series); ++s) {
    o += std::string("# HELP ") + series[s].name + " " + series[s].help + "\n# TYPE " +
         series[s].name + " " + series[s].type + "\n";
    for (const auto& r : ranks_) {
      double v = 0;
      {
        std::lock_guard<std::mutex> lock(r->mu);
        const sim::Engine& e = *r->engine;
        switch (s) {
          case 0:
            v = static_cast<double>(e.NumRunning());
            break;
          case 1:
            v = static_cast<double>(e.NumWaiting());
            break;
          case 2:
            v = static_cast<double>(e.cache().NumUsed()) /
                static_cast<double>(e.cache().num_blocks());
            break;
          case 3:
            v = static_cast<double>(r->prefix_queries.load());
            break;
          case 4:
            v = static_cast<double>(r->prefix_hits.load());
            break;
          case 5:
            v = static_cast<double>(r->tokens_out.load());
            break;
          case 6:
            v = static_cast<double>(r->finished.load());
            break;
          case 7:
            v = static_cast<double>(e.stats().preemptions);
            break;
          case 8:
            v = static_cast<double>(r->batches.load());
            break;
          case 9:
            v = static_cast<double>(r->dropped.load());
            break;
          case 10:
            v = static_cast<double>(r->reordered.load());
            break;
          case 11:
            v = static_cast<double>(e.cache().NumCached());
            break;
        }
      }
      line(series[s].name, r->index, v);
    }
  }
  return o;
}

std::vector<std::string> EngineRunner::EventEndpoints() const {
  std::vector<std::string> out;
  for (const auto& r : ranks_) out.push_back(r->publisher->pub_endpoint());
  return out;
}

std::vector<std::string> EngineRunner::ReplayEndpoints() const {
  std::vector<std::string> out;
  for (const auto& r : ranks_) out.push_back(r->publisher->replay_endpoint());
  return out;
}

}  // namespace infera::mock
