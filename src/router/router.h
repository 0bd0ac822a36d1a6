// Router: the infera-router server, assembled from the request pipeline
// (doc/router-pipeline.md; architecture §1, §2, §6, §7, §12, §13).
//
//   http::Server -> ApiFront (route table, admin views)
//     -> RequestPipeline: ParseApiRequest -> upstream body -> PromptEncoder
//     -> Dispatcher (AttemptLoop): PickPlanner::PlanMixed / PlanPd(ctx, fleet snapshot)
//        -> Upstream::Send -> failover / Relay (SSE, Anthropic transform)
//        -> PickGuards released -> RouterMetrics
//   discovery -> WorkerSet (records, DP expansion, breakers, Fleet snapshots)
//   KV events -> KvEventSource (ZMQ ingestor or NATS JetStream) -> SharedKvIndex (owned here)
//
// Failure handling, status codes and error shapes: doc/router.md. Time and
// randomness are injected (RouterEnv) so tests run the whole router in-process with a
// ManualClock, a seed and a fake Upstream.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/approx_cache.h"
#include "core/clock.h"
#include "core/selector.h"
#include "core/session_affinity.h"
#include "discovery/discovery.h"
#include "discovery/worker_record.h"
#include "events/kv_event_source.h"
#include "events/kv_snapshot.h"
#include "events/shared_kv_index.h"
#include "http/io_pool.h"
#include "http/server.h"
#include "router/dispatch/admission_dispatcher.h"
#include "router/dispatch/nats_upstream.h"
#include "router/dispatch/pd/options.h"
#include "router/dispatch/upstream.h"
#include "router/encode/render_parity_prober.h"
#include "router/plan/decode_demand_routing.h"
#include "router/plan/health_checker.h"
#include "router/sync/replica_sync.h"

namespace infera::router {

class AdminViews;
class KvSnapshotPeer;
class ApiFront;
class Dispatcher;
class PickPlanner;
class PromptEncoder;
class Readiness;
class RequestIds;
class RequestPipeline;
class RouterMetrics;
class TenantSalt;
class WorkerSet;
class WorkPool;

struct RouterOptions {
  http::ServerOptions server;  // host, port, limits
  int threads = 0;             // 0: all hardware threads
  core::PolicyConfig policy;
  std::string tokenizer_path;  // --router-tokenizer-path ("" = estimate)
  // --max-tokenize-bytes: longer prompts are sized by the estimate (0: no limit).
  uint64_t max_tokenize_bytes = 1ull << 20;
  // --tokenize-threads: the work pool (prompt encoding, large bodies' parse and
  // translation); 0: max(1, cores / 2).
  int tokenize_threads = 0;
  // --max-sse-event-bytes, --max-translated-response-bytes (doc/router.md "Streaming
  // relay").
  size_t max_sse_event_bytes = 16u << 20;
  size_t max_translated_response_bytes = 16u << 20;
  // --router-random-seed: the random policy's seed; nullopt: from the OS (or derived
  // from RouterEnv::seed when a test gives one). Overrides policy.random_seed.
  std::optional<uint64_t> random_seed;
  bool kv_events = true;  // --kv-event-transport zmq (false: none)
  // Approximate mode (doc/approx-mode.md) with --kv-event-transport none and the
  // kv-aware policy: --approx-ttl-s (ttl_ns 0: off), --approx-max-blocks.
  core::ApproxConfig approx;
  std::string kv_events_topic;
  // --max-index-blocks: the bound of every target's view; nullopt: per target from its
  // record's num_gpu_blocks, else kDefaultMaxIndexBlocks (worker_set.h).
  std::optional<size_t> max_index_blocks;
  // --worker-max-num-seqs: every worker's max_num_seqs for the sequence-slot term
  // (--kv-seq-wait-load, doc/selection.md); 0: unknown, no slot term.
  size_t worker_max_num_seqs = 0;
  // --kv-event-transport nats: events from JetStream (doc/nats-transport.md), not ZMQ.
  bool kv_events_nats = false;
  // --kv-ingest-threads: ZMQ ingestion shards, one thread and subscription loop each
  // (events::ShardedKvEventSource, doc/kv-events.md "Sharded ingestion"); 1: one ingestor.
  int kv_ingest_threads = 1;
  events::KvSnapshotOptions kv_snapshot;  // --kv-snapshot-* (doc/snapshot.md)
  std::string nats_server = "nats://127.0.0.1:4222";  // --nats-server
  // --ready-after-replay: /ready answers 503 "starting" until the views are first
  // rebuilt at start (Readiness; /health never waits for it).
  bool ready_after_replay = true;
  // Runs once when the start-up latch first holds (Readiness::set_on_latched): the
  // binary's start-up allocator options end there (apps/infera-router).
  std::function<void()> on_ready;
  int64_t request_timeout_ms = 600'000;
  int max_attempts = 3;  // workers tried before the first byte
  // --breaker-failures (0: no breaker), --breaker-cooldown-ms, --breaker-max-cooldown-ms
  // (a failed half-open probe doubles the cooldown up to it).
  uint32_t breaker_failures = 5;
  int64_t breaker_cooldown_ms = 10'000;
  int64_t breaker_max_cooldown_ms = 60'000;
  // --first-byte-timeout-ms: a streaming attempt whose answer head has not arrived
  // this long after sending fails over (AttemptWatch; 0: off).
  int64_t first_byte_timeout_ms = 60'000;
  // --health-check-* (HealthChecker).
  HealthCheckOptions health_check;
  PdOptions pd;          // --pd-min-uncached-tokens, --pd-prefill-guard-release
  DemandOptions demand;  // --decode-input-demand, --decode-request-weight
  // --session-affinity, --session-affinity-max-sessions, --session-affinity-ttl-s
  core::SessionConfig sessions;
  // --render-parity-interval-s (doc/render-parity.md): interval_ns 0 = at discovery only.
  RenderParityOptions render_parity;
  // --router-replica-sync (doc/replica-sync.md): share in-flight load with the other
  // router replicas over NATS core; nullopt: off.
  std::optional<ReplicaSyncOptions> replica_sync;
  // --tenant-cache-salt header:NAME (doc/router.md "Tenant isolation"): every request
  // gets its tenant's cache_salt, keyed by tenant_salt_key (--tenant-cache-salt-key-file,
  // else random); "" = off.
  std::string tenant_salt_header;
  std::string tenant_salt_key;
  // --request-transport nats (doc/nats-request-transport.md): workers whose record says
  // request_transport "nats" are reached over NATS; nullopt: HTTP only.
  std::optional<NatsUpstreamOptions> nats_requests;
  // --admin-token (doc/router.md "Admin token"): "" = off; else /v1/admin*, /v1/workers*,
  // /dashboard* (and /metrics with --protect-metrics) need `Authorization: Bearer` it.
  std::string admin_token;
  bool protect_metrics = false;
  // --route-receipt (doc/router.md "Route receipt"): answers carry X-Infera-Route.
  bool route_receipt = false;
  // --admission-queue, --queue-* (doc/admission.md): off by default.
  AdmissionOptions admission;
};

// What the router takes from its environment; the defaults are the real ones.
struct RouterEnv {
  const core::Clock* clock = nullptr;  // null: the steady clock. Must outlive the router.
  std::optional<uint64_t> seed;        // request-id salt seed; nullopt: std::random_device
  // The request transport; null: per worker, HTTP over the router's event loops or NATS
  // (RouterOptions::nats_requests).
  std::function<std::unique_ptr<Upstream>(http::IoPool& pool, const core::Clock& clock)> upstream;
};

class Router {
 public:
  explicit Router(RouterOptions options, RouterEnv env = {});
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Loads the tokenizer/template (when configured), binds and starts serving.
  absl::Status Start();
  uint16_t port() const;
  // Graceful: stop accepting, drain in-flight requests and streams, stop threads.
  void Shutdown();

  void AddWorker(const discovery::WorkerRecord& record);
  void RemoveWorker(const std::string& worker_id);
  discovery::DiscoveryCallbacks Callbacks();

  // Pick guards not yet released (tests: must return to 0).
  size_t PendingGuards() const;
  // Decode input-demand reservations not yet released (0 when idle).
  uint64_t PendingDemandReservations() const;
  // Active blocks of one target (worker_id, dp_rank); 0 when unknown.
  size_t ActiveBlocks(const core::TargetKey& key) const;
  // Blocks of prefill still pending on one target (load term `work`); 0 when unknown.
  double PendingPrefillBlocks(const core::TargetKey& key) const;
  std::string RenderMetrics() const;
  // The random policy's seed in force (logged at start-up).
  uint64_t random_seed() const { return options_.policy.random_seed; }

 private:
  // The construction steps, in member order (each uses what the ones before made).
  void MakePlanner();                       // planner_ (and approximate mode)
  WorkerSetOptions WorkerOptions() const;   // for workers_
  void MakeUpstream(const RouterEnv& env);  // upstream_, nats_
  void MakeProbes();                        // parity_, health_, fed by workers_
  void MakePipeline(const RouterEnv& env);  // dispatcher_, tenant_salt_, pipeline_
  void MakeViews();                         // readiness_, views_, replica_
  // The target id of (worker_id, dp_rank) in the current fleet.
  std::optional<core::TargetId> FindTarget(const core::TargetKey& key) const;

  RouterOptions options_;
  const core::Clock* clock_;
  std::unique_ptr<http::IoPool> pool_;
  events::SharedKvIndex index_;
  std::unique_ptr<events::KvEventSource> events_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::unique_ptr<PickPlanner> planner_;
  std::unique_ptr<WorkerSet> workers_;
  std::unique_ptr<PromptEncoder> encoder_;
  // After the encoder: destroyed (joined) first, while the tokenizer its jobs read
  // is alive.
  std::unique_ptr<WorkPool> work_pool_;
  std::unique_ptr<Upstream> upstream_;
  NatsUpstream* nats_ = nullptr;            // owned by upstream_; null: no NATS request transport
  std::unique_ptr<Dispatcher> dispatcher_;  // AttemptLoop: mixed and PD
  std::unique_ptr<AdmissionDispatcher> admission_;  // null: --admission-queue off
  std::unique_ptr<TenantSalt> tenant_salt_;         // null: --tenant-cache-salt off
  std::unique_ptr<RequestPipeline> pipeline_;
  std::unique_ptr<AdminViews> views_;
  std::unique_ptr<RequestIds> ids_;
  std::unique_ptr<ApiFront> front_;
  std::unique_ptr<RenderParityProber> parity_;
  std::unique_ptr<HealthChecker> health_;
  std::unique_ptr<Readiness> readiness_;
  std::unique_ptr<ReplicaSync> replica_;  // null: --router-replica-sync off
  std::unique_ptr<KvSnapshotPeer> peer_;  // null: no snapshots or no replica sync
  std::unique_ptr<http::Server> server_;
  bool started_ = false;
};

}  // namespace infera::router
