#include "router/router.h"

#include <algorithm>
#include <random>

#include "events/kv_event_ingestor.h"
#include "events/sharded_event_source.h"
#include "events/nats_event_source.h"
#include "log/steady_clock.h"
#include "router/admin/admin_views.h"
#include "router/api_front.h"
#include "router/dispatch/attempt_loop.h"
#include "router/dispatch/http_upstream.h"
#include "router/dispatch/transport_upstream.h"
#include "router/encode/prompt_encoder.h"
#include "router/kv_snapshot_peer_wiring.h"
#include "router/kv_snapshot_wiring.h"
#include "router/metrics/router_metrics.h"
#include "router/plan/pick_planner.h"
#include "router/plan/readiness.h"
#include "router/plan/worker_set.h"
#include "router/request/request_ids.h"
#include "router/request/tenant_salt.h"
#include "router/request_pipeline.h"
#include "router/work_pool.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

uint64_t OsRandom() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

uint64_t SaltFrom(const std::optional<uint64_t>& seed) {
  if (seed) return core::Random(*seed).Next();
  return OsRandom();
}

// --router-random-seed, else one derived from the test's seed, else the OS's.
uint64_t PolicySeed(const std::optional<uint64_t>& flag, const std::optional<uint64_t>& env) {
  if (flag) return *flag;
  if (env) return core::Random(*env ^ 0x9e3779b97f4a7c15ull).Next();
  return OsRandom();
}

// This router's id in X-Infera-Via: 16 hex digits, random per process.
std::string HopId(uint64_t salt) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(16, '0');
  for (int i = 15; i >= 0; --i, salt >>= 4) id[static_cast<size_t>(i)] = kHex[salt & 15];
  return id;
}

}  // namespace

Router::Router(RouterOptions options, RouterEnv env) : options_(std::move(options)) {
  clock_ = env.clock != nullptr ? env.clock : &log::ProcessSteadyClock();
  options_.policy.random_seed = PolicySeed(options_.random_seed, env.seed);
  if (options_.policy.policy == core::Policy::kRandom) {
    spdlog::info("router: random policy seed {} (--router-random-seed {} repeats it)",
                 options_.policy.random_seed, options_.policy.random_seed);
  }
  int threads = options_.threads > 0 ? options_.threads : http::IoPool::HardwareThreads();
  pool_ = std::make_unique<http::IoPool>(threads);
  if (options_.kv_events_nats) {
    events::NatsSourceOptions nats;
    nats.nats.url = options_.nats_server;
    nats.clock = clock_;
    PrepareKvSnapshots(options_.kv_snapshot, nats);  // doc/snapshot.md §6.4
    events_ = std::make_unique<events::NatsEventSource>(index_, std::move(nats));
  } else {
    events::IngestorOptions ingest{.replay_on_add = true, .clock = clock_};
    if (options_.kv_events && options_.replica_sync) {  // doc/snapshot.md §9.1
      peer_ = MakeKvSnapshotPeer(options_.kv_snapshot, options_.replica_sync->nats_url);
    }
    events::FetchedSnapshot fetched;
    if (peer_ && options_.kv_snapshot.peer_join) fetched = peer_->JoinIfNeeded();
    // The index still holds no target.
    PrepareKvSnapshots(options_.kv_snapshot, ingest, std::move(fetched));
    if (peer_ && ingest.snapshot_stats) ingest.snapshot_stats->after_write = peer_->AfterWrite();
    events_ = events::MakeZmqEventSource(index_, std::move(ingest),
                                         static_cast<size_t>(options_.kv_ingest_threads));
  }
  metrics_ = std::make_unique<RouterMetrics>(options_.policy.policy);
  MakePlanner();
  workers_ = std::make_unique<WorkerSet>(WorkerOptions(), *events_, *planner_, *metrics_);
  work_pool_ = std::make_unique<WorkPool>(options_.tokenize_threads);
  encoder_ = std::make_unique<PromptEncoder>(
      PromptEncoderOptions{.max_tokenize_bytes = options_.max_tokenize_bytes}, *metrics_,
      *work_pool_);
  MakeUpstream(env);
  MakeProbes();
  MakePipeline(env);
  MakeViews();
  ids_ = std::make_unique<RequestIds>(SaltFrom(env.seed));
  front_ = std::make_unique<ApiFront>(
      *pipeline_, *views_, *ids_,
      options_.admin_token.empty() ? AdminAuth()
                                   : AdminAuth(options_.admin_token, options_.protect_metrics));
}

void Router::MakePlanner() {
  const bool approx = !options_.kv_events && !options_.kv_events_nats &&
                      options_.approx.ttl_ns > 0 &&
                      options_.policy.policy == core::Policy::kKvAware;
  if (approx) options_.policy.settle_from_views = false;
  planner_ = std::make_unique<PickPlanner>(
      options_.policy, index_, *clock_, *metrics_,
      core::PdConfig{.min_uncached_tokens = options_.pd.min_uncached_tokens}, options_.sessions,
      options_.demand);
  planner_->set_route_receipt(options_.route_receipt);
  if (approx) {
    planner_->EnableApprox(options_.approx, index_);
    spdlog::info(
        "router: approximate mode: no KV events; each pick's prompt counts as cached "
        "on its worker for {} s, at most {} blocks per worker",
        options_.approx.ttl_ns / 1e9, options_.approx.max_blocks);
  }
}

WorkerSetOptions Router::WorkerOptions() const {
  return WorkerSetOptions{
      .kv_events = options_.kv_events,
      .kv_events_topic = options_.kv_events_topic,
      .max_index_blocks = options_.max_index_blocks,
      .max_num_seqs = options_.worker_max_num_seqs,
      .breaker = BreakerOptions{.failure_threshold = options_.breaker_failures,
                                .cooldown_ms = options_.breaker_cooldown_ms,
                                .max_cooldown_ms = options_.breaker_max_cooldown_ms,
                                // A probe that ends on its own is reported by the request
                                // timeout at the latest.
                                .probe_lease_ms = options_.request_timeout_ms +
                                                  std::max(options_.breaker_cooldown_ms,
                                                           options_.breaker_max_cooldown_ms)},
      .checks = options_.health_check.thresholds};
}

void Router::MakeUpstream(const RouterEnv& env) {
  if (env.upstream) {
    upstream_ = env.upstream(*pool_, *clock_);
    return;
  }
  std::unique_ptr<NatsUpstream> nats;
  if (options_.nats_requests) {
    nats = std::make_unique<NatsUpstream>(*options_.nats_requests, *clock_);
    nats_ = nats.get();
  }
  upstream_ = std::make_unique<TransportUpstream>(std::make_unique<HttpUpstream>(*pool_, *clock_),
                                                  std::move(nats));
}

void Router::MakeProbes() {
  parity_ = std::make_unique<RenderParityProber>(options_.render_parity, *pool_, *upstream_,
                                                 *clock_, *workers_, *metrics_);
  health_ = std::make_unique<HealthChecker>(options_.health_check, *pool_, *upstream_, *clock_,
                                            *workers_, *metrics_);
  workers_->set_on_added(
      [parity = parity_.get(), health = health_.get()](std::shared_ptr<const FleetWorker> w) {
        health->OnAdded(w);
        parity->OnAdded(std::move(w));
      });
}

void Router::MakePipeline(const RouterEnv& env) {
  dispatcher_ = std::make_unique<AttemptLoop>(
      AttemptLoopOptions{.max_attempts = options_.max_attempts,
                         .request_timeout_ms = options_.request_timeout_ms,
                         .first_byte_timeout_ms = options_.first_byte_timeout_ms,
                         .pd = options_.pd,
                         .seed = SaltFrom(env.seed) ^ 0x5044},
      *workers_, *planner_, *upstream_, *clock_, *metrics_);
  if (!options_.tenant_salt_header.empty()) {
    tenant_salt_ =
        std::make_unique<TenantSalt>(options_.tenant_salt_header, options_.tenant_salt_key);
    // Every request is salted: a chain the events cannot attribute is never matched.
    index_.WithIndex([](const core::KvIndex& index) { index.NoteSaltedTraffic(); });
    spdlog::info("router: tenant cache salt from header {}", options_.tenant_salt_header);
  }
  if (options_.admission.enabled) {
    admission_ = std::make_unique<AdmissionDispatcher>(options_.admission, *workers_, *planner_,
                                                       *dispatcher_, *clock_);
    planner_->set_on_load_lowered([queue = admission_.get()] { queue->DrainAll(); });
  }
  pipeline_ = std::make_unique<RequestPipeline>(
      PipelineOptions{.request_timeout_ms = options_.request_timeout_ms,
                      .relay = {.max_sse_event_bytes = options_.max_sse_event_bytes,
                                .max_translated_bytes = options_.max_translated_response_bytes},
                      .router_id = HopId(SaltFrom(env.seed)),
                      .admission = admission_.get()},
      *encoder_, *dispatcher_, *clock_, *metrics_, *work_pool_, tenant_salt_.get());
}

void Router::MakeViews() {
  readiness_ =
      std::make_unique<Readiness>(options_.ready_after_replay, *events_, *workers_, *clock_);
  if (options_.on_ready) readiness_->set_on_latched(options_.on_ready);
  views_ = std::make_unique<AdminViews>(*workers_, *planner_, index_, *events_, *metrics_,
                                        *readiness_, *clock_);
  if (options_.replica_sync) {
    replica_ = std::make_unique<ReplicaSync>(*options_.replica_sync, *planner_, *workers_, *clock_);
    planner_->set_on_plan([sync = replica_.get()] { sync->NotifyPlan(); });
    views_->set_replica_sync(replica_.get());
  }
  if (peer_)
    views_->add_metrics([peer = peer_.get()](std::string& out) { peer->RenderMetrics(out); });
  if (admission_) {
    views_->add_metrics(
        [queue = admission_.get()](std::string& out) { queue->RenderMetrics(out); });
  }
  if (nats_ != nullptr) {
    views_->add_metrics([nats = nats_](std::string& out) { nats->RenderMetrics(out); });
  }
  views_->add_metrics(
      [events = events_.get()](std::string& out) { RenderKvSnapshotMetrics(*events, out); });
}

Router::~Router() {
  if (started_) Shutdown();
  if (peer_) peer_->Stop();
  if (replica_) replica_->Stop();
  pool_->Stop();
}

absl::Status Router::Start() {
  if (absl::Status s = encoder_->Load(options_.tokenizer_path); !s.ok()) return s;
  parity_->Start(encoder_->RenderProbe());
  health_->Start();
  readiness_->Start(*pool_);
  if (admission_) admission_->Start(*pool_);
  if (replica_) {
    if (absl::Status s = replica_->Start(); !s.ok()) return s;
    if (peer_) {
      if (absl::Status s = peer_->StartServing(replica_->connection()->conn()); !s.ok()) return s;
    }
  }
  if (nats_ != nullptr) {
    if (absl::Status s = nats_->Start(); !s.ok()) return s;
  }
  http::ServerOptions sopt = options_.server;
  sopt.error_body = &ApiFront::ServerErrorBody;
  sopt.other_fds = [this] { return events_->DescriptorsHeld(); };
  server_ = std::make_unique<http::Server>(
      *pool_, sopt,
      [this](http::Request& r, http::ResponseWriter& w) { return front_->Handle(r, w); });
  if (absl::Status s = server_->Listen(); !s.ok()) return s;
  // Records pointing at this router's own address are refused from now on (loops).
  workers_->set_self_address(std::make_shared<const discovery::SelfAddress>(
      discovery::SelfAddress::ForListen(sopt.host, server_->port())));
  server_->Start();
  pool_->Start();
  started_ = true;
  return absl::OkStatus();
}

uint16_t Router::port() const { return server_ ? server_->port() : 0; }

void Router::Shutdown() {
  if (!started_) return;
  started_ = false;
  StartFinalKvSnapshot(*events_);  // beside the drain (doc/snapshot.md §5.3)
  server_->Shutdown();
  WaitFinalKvSnapshot(*events_, 5'000);
  if (peer_) peer_->Stop();
  if (replica_) replica_->Stop();
  pool_->Stop();
}

void Router::AddWorker(const discovery::WorkerRecord& record) { workers_->Add(record); }
void Router::RemoveWorker(const std::string& worker_id) { workers_->Remove(worker_id); }
discovery::DiscoveryCallbacks Router::Callbacks() { return workers_->Callbacks(); }

size_t Router::PendingGuards() const { return planner_->PendingGuards(); }
uint64_t Router::PendingDemandReservations() const { return planner_->PendingDemandReservations(); }

std::optional<core::TargetId> Router::FindTarget(const core::TargetKey& key) const {
  for (const auto& w : *workers_->Snapshot()) {
    if (w->record.worker_id != key.worker_id || key.dp_rank < w->record.dp_rank) continue;
    const size_t r = key.dp_rank - w->record.dp_rank;
    if (r < w->targets.size()) return w->targets[r];
  }
  return std::nullopt;
}

size_t Router::ActiveBlocks(const core::TargetKey& key) const {
  const std::optional<core::TargetId> t = FindTarget(key);
  return t ? planner_->ActiveBlocks(*t) : 0;
}

double Router::PendingPrefillBlocks(const core::TargetKey& key) const {
  const std::optional<core::TargetId> t = FindTarget(key);
  return t ? planner_->PendingPrefillBlocks(*t) : 0;
}

std::string Router::RenderMetrics() const { return views_->MetricsText(); }

}  // namespace infera::router
