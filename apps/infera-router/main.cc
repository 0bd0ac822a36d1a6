// infera-router: flags -> RouterOptions, discovery -> Router callbacks, signals.
// `infera-router render ...` renders chat templates (src/template/render_command.h).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>

#include "discovery/discovery_factory.h"
#include "discovery/static_discovery.h"
#include "router/log_levels.h"
#include "router/router.h"
#include "spdlog/spdlog.h"
#include "template/render_command.h"
#include "tokenizer/model_path.h"
#include "transport/nats_request_flags.h"

namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "render") == 0) {
    return infera::chat::RunRenderCommand(argc - 1, argv + 1);
  }
  using infera::router::RouterOptions;
  RouterOptions opt;
  CLI::App app{
      "infera-router: KV-cache-aware router for LLM inference workers (OpenAI and Anthropic "
      "HTTP API).\nSubcommand: `infera-router render --help` renders chat templates."};
  std::string host = "0.0.0.0";
  int port = 8000;
  std::string policy = "kv-aware";
  std::string load_term = "work";
  double prefill_w = -1, decode_w = -1;
  std::string discovery_backend = "static";
  std::string etcd_endpoint = "127.0.0.1:2379";
  std::string etcd_prefix = "/infera/workers/";
  std::vector<std::string> worker_flags;
  std::string workers_file;
  std::string kv_transport = "zmq";
  std::string request_transport = "http";
  std::string log_level = "info";
  uint64_t random_seed = 0;
  uint64_t max_body = opt.server.max_body_bytes;
  uint32_t max_header = opt.server.max_header_bytes;
  std::string pd_guard_release = "completion";
  std::string session_affinity = "off";
  double session_ttl_s = 3600;
  std::string demand_mode, demand_weight;

  app.add_option("--host", host, "Address to listen on")->capture_default_str();
  app.add_option("--port", port, "Port to listen on (0: any free port)")->capture_default_str();
  app.add_option("--threads", opt.threads, "Event-loop threads (0: all cores)")
      ->capture_default_str();
  app.add_option("--router-policy", policy, "kv-aware | round-robin | random | least-load")
      ->capture_default_str();
  app.add_option("--kv-overlap-weight", opt.policy.overlap_weight,
                 "Weight of missed prompt blocks against load (0: pure load balance)")
      ->capture_default_str();
  app.add_option("--kv-prefill-overlap-weight", prefill_w,
                 "Overlap weight for prefill picks (default: --kv-overlap-weight)");
  app.add_option("--kv-decode-overlap-weight", decode_w,
                 "Overlap weight for decode picks (default: --kv-overlap-weight)");
  app.add_option("--pd-min-uncached-tokens", opt.pd.min_uncached_tokens,
                 "PD: below this many uncached prompt tokens on the best prefill worker, the "
                 "decode worker serves the request alone (0: always disaggregate)")
      ->capture_default_str();
  app.add_option("--pd-prefill-guard-release", pd_guard_release,
                 "PD: release the prefill leg's load when it answers (prefill) or when the "
                 "request ends (completion; serial protocols always release at prefill)")
      ->capture_default_str();
  app.add_option("--session-affinity", session_affinity,
                 "off | prefill (keep a session's prefill target, or its target in a mixed "
                 "fleet) | both (its decode target too); the session is the body's session_id "
                 "or prompt_cache_key, or the X-Session-Id header")
      ->capture_default_str();
  app.add_option("--session-affinity-max-sessions", opt.sessions.max_sessions,
                 "Sessions kept bound; the least recently used goes first")
      ->capture_default_str();
  app.add_option("--session-affinity-ttl-s", session_ttl_s,
                 "A session unused this long is forgotten (seconds)")
      ->capture_default_str();
  CLI::Option* demand_flag = app.add_option(
      "--decode-input-demand", demand_mode,
      "PD: decode picks by in-flight input tokens: off | shadow (suggest and count) | on "
      "(requires --router-policy kv-aware; env INFERA_DECODE_INPUT_DEMAND; default off)");
  CLI::Option* weight_flag = app.add_option(
      "--decode-request-weight", demand_weight,
      "Decode input demand: cost += W x requests the target holds (requires "
      "--decode-input-demand shadow|on; env INFERA_DECODE_REQUEST_WEIGHT; default 0)");
  app.add_option("--kv-host-hit-weight", opt.policy.host_hit_weight,
                 "Credit of a host-tier cache hit relative to a device hit")
      ->capture_default_str();
  app.add_option("--kv-disk-hit-weight", opt.policy.disk_hit_weight,
                 "Credit of a disk-tier cache hit relative to a device hit")
      ->capture_default_str();
  app.add_option("--kv-recent-decay", opt.policy.recent_decay,
                 "Decay of recently-routed blocks per pick (0: off; --load-term spec)")
      ->capture_default_str();
  app.add_option("--load-term", load_term,
                 "work (pending prefill + KV pressure) | spec (active blocks until completion)")
      ->capture_default_str();
  app.add_option("--router-tokenizer-path,--kv-tokenizer-path", opt.tokenizer_path,
                 "Directory with tokenizer.json and tokenizer_config.json (chat template), or "
                 "a Hugging Face model id (Qwen/Qwen3-0.6B) found offline in the hub cache "
                 "($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub); without it prompts "
                 "are estimated as bytes/4 and only integer-array prompts get cache hits");
  app.add_option("--max-tokenize-bytes", opt.max_tokenize_bytes,
                 "Prompts longer than this (completions text, or the chat body and its "
                 "rendering) are not tokenized: sized by the bytes/4 estimate (0: no limit)")
      ->capture_default_str();
  app.add_option("--tokenize-threads", opt.tokenize_threads,
                 "Threads rendering and tokenizing prompts of 16 KiB and more off the event "
                 "loops (0: max(1, cores / 2))")
      ->capture_default_str();
  CLI::Option* seed_flag =
      app.add_option("--router-random-seed", random_seed,
                     "Seed of --router-policy random (default: from the OS, logged at start)");
  double parity_interval_s = 300;
  app.add_option("--render-parity-interval-s", parity_interval_s,
                 "Re-probe every worker's /tokenize this often to check it renders chats like "
                 "the router (workers are probed when discovered; 0: only then)")
      ->capture_default_str();
  app.add_option("--discovery-backend", discovery_backend,
                 "static | etcd | kubernetes (Pods by --k8s-label-selector, their "
                 "infera.amd.com/worker-info annotation)")
      ->capture_default_str();
  infera::discovery::DiscoveryConfig dcfg;
  CLI::Option* selector_flag =
      app.add_option("--k8s-label-selector", dcfg.k8s_label_selector,
                     "kubernetes: label selector of the fleet's worker Pods (required; env "
                     "INFERA_K8S_LABEL_SELECTOR)");
  app.add_option("--k8s-namespace", dcfg.k8s_namespace,
                 "kubernetes: namespace to watch (default: the Pod's own, from the service "
                 "account, else default)");
  app.add_option("--k8s-api-server", dcfg.k8s_api_server,
                 "kubernetes: API server URL https://host:port (default: in-cluster, "
                 "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT with the service account)");
  app.add_option("--k8s-token-file", dcfg.k8s_token_file,
                 "kubernetes: bearer token file for --k8s-api-server (read for every call)");
  app.add_option("--k8s-ca-file", dcfg.k8s_ca_file,
                 "kubernetes: CA bundle (PEM) for an https --k8s-api-server (default: system)");
  app.add_option("--k8s-service-account-dir", dcfg.k8s_service_account_dir,
                 "kubernetes, in-cluster: where token, ca.crt and namespace are mounted")
      ->capture_default_str();
  app.add_option("--etcd-endpoint", etcd_endpoint, "etcd endpoints host:port[,host:port]")
      ->capture_default_str();
  app.add_option("--etcd-prefix", etcd_prefix, "etcd key prefix of worker records")
      ->capture_default_str();
  app.add_option("--worker", worker_flags, infera::discovery::WorkerFlagHelp());
  app.add_option("--workers-file", workers_file, "JSON list of worker records (etcd schema)");
  app.add_option("--kv-event-transport", kv_transport,
                 "zmq (engines' ZMQ streams) | nats (JetStream, fed by infera-register "
                 "--kv-relay nats) | none (approximate mode, see --approx-ttl-s)")
      ->capture_default_str();
  double approx_ttl_s = 120;
  app.add_option("--approx-ttl-s", approx_ttl_s,
                 "--kv-event-transport none, kv-aware: a routed prompt counts as cached on its "
                 "worker this long after its last pick (0: no cache term)")
      ->capture_default_str();
  app.add_option("--approx-max-blocks", opt.approx.max_blocks,
                 "--kv-event-transport none: predicted cached blocks kept per worker")
      ->capture_default_str();
  CLI::Option* nats_flag =
      app.add_option("--nats-server", opt.nats_server,
                     "NATS server URL(s) for --kv-event-transport nats, --request-transport nats "
                     "and --router-replica-sync (without the flag: env NATS_SERVER)")
          ->capture_default_str();
  bool replica_sync = false;
  infera::router::ReplicaSyncOptions replica;
  app.add_flag("--router-replica-sync", replica_sync,
               "Share in-flight load with the other router replicas in front of the same fleet "
               "over NATS core (--nats-server), so their load terms see the fleet's load");
  app.add_option("--router-replica-id", replica.replica_id,
                 "This replica's id on the sync subjects (default: <hostname>:<pid>:<random>)");
  app.add_option("--router-replica-flush-ms", replica.flush_ms,
                 "Replica sync: at most one load delta per this many ms (a burst is one message)")
      ->capture_default_str();
  app.add_option("--router-replica-heartbeat-ms", replica.heartbeat_ms,
                 "Replica sync: publish a full load snapshot this often")
      ->capture_default_str();
  app.add_option("--router-replica-ttl-ms", replica.ttl_ms,
                 "Replica sync: a peer silent this long stops counting (its load expires)")
      ->capture_default_str();
  app.add_option("--ready-after-replay", opt.ready_after_replay,
                 "/health answers 503 \"starting\" until the KV views are rebuilt at start "
                 "(engines' replay sockets, or the JetStream stream)")
      ->capture_default_str();
  app.add_option("--kv-events-topic", opt.kv_events_topic,
                 "ZMQ subscription topic prefix (empty: all)");
  size_t max_index_blocks = 0;
  CLI::Option* bound_flag =
      app.add_option("--max-index-blocks", max_index_blocks,
                     "Bound of each target's cache view in blocks, oldest evicted first (0: none; "
                     "default: 1.25 x the worker record's num_gpu_blocks, else 1048576)");
  app.add_option("--request-transport", request_transport,
                 "http | nats: with nats, workers whose record says request_transport nats get "
                 "their requests over NATS (--nats-server; infera-register --request-transport "
                 "nats serves them), the others over HTTP")
      ->capture_default_str();
  infera::transport::NatsRequestFlags nats_request_flags;
  nats_request_flags.Add(app, infera::transport::NatsRequestFlags::Side::kRouter);
  int64_t nats_max_pending = 0;
  CLI::Option* nats_pending_flag =
      app.add_option("--nats-req-max-pending", nats_max_pending,
                     "Infera's JetStream admission throttle: only 0 (off) is supported (env "
                     "INFERA_NATS_REQ_MAX_PENDING)");
  app.add_option("--request-timeout-ms", opt.request_timeout_ms, "Per-request upstream deadline")
      ->capture_default_str();
  app.add_option("--max-attempts", opt.max_attempts,
                 "Workers tried per request before the first byte (failover)")
      ->capture_default_str();
  app.add_option("--breaker-failures", opt.breaker_failures,
                 "Consecutive failures that open a worker's circuit breaker")
      ->capture_default_str();
  app.add_option("--breaker-cooldown-ms", opt.breaker_cooldown_ms,
                 "Open-breaker time before a half-open probe")
      ->capture_default_str();
  app.add_option("--max-body-bytes", max_body, "Request body limit (413 above)")
      ->capture_default_str();
  app.add_option("--max-header-bytes", max_header, "Request header limit (431 above)")
      ->capture_default_str();
  app.add_option("--max-connections", opt.server.max_connections,
                 "Open client connections; past it a new one gets 503 (0: (open-file limit "
                 "- 64) / 2, the soft limit raised to the hard one at start)")
      ->capture_default_str();
  app.add_option("--idle-timeout-ms", opt.server.idle_timeout_ms,
                 "Close idle keep-alive client connections after this")
      ->capture_default_str();
  app.add_option("--drain-timeout-ms", opt.server.drain_timeout_ms,
                 "On SIGTERM, wait this long for in-flight requests")
      ->capture_default_str();
  CLI::Option* log_flag =
      app.add_option("--log-level", log_level,
                     "trace | debug | info | warn | error | off, or per target: "
                     "info,decode_demand=debug (also infera_router::decode_demand=debug); "
                     "without it RUST_LOG is read (default info)")
          ->capture_default_str();
  std::string router_backend;
  CLI::Option* backend_flag = app.add_option(
      "--router-backend", router_backend,
      "python | rust (Infera's choice of data plane; env INFERA_ROUTER_BACKEND): both run "
      "this router's one native data plane");
  CLI11_PARSE(app, argc, argv);

  auto levels = infera::router::ResolveLogLevels(
      log_flag->count() > 0 ? std::optional<std::string>(log_level) : std::nullopt,
      std::getenv("RUST_LOG"));
  if (!levels.ok()) {
    spdlog::error("{}", std::string(levels.status().message()));
    return 2;
  }
  infera::router::ApplyLogLevels(*levels);
  for (const std::string& target : levels->ignored) {
    spdlog::warn(
        "{}: log target '{}' is a crate of Infera's Rust router, not part of this one: "
        "ignored",
        levels->source, target);
  }
  if (backend_flag->count() == 0) {
    if (const char* env = std::getenv("INFERA_ROUTER_BACKEND"); env != nullptr && *env != '\0') {
      router_backend = env;
    }
  }
  if (!router_backend.empty()) {
    if (router_backend != "python" && router_backend != "rust") {
      spdlog::error("--router-backend (or INFERA_ROUTER_BACKEND) must be python or rust, got '{}'",
                    router_backend);
      return 2;
    }
    spdlog::info(
        "router: --router-backend {}: infera-router has one native (C++) data plane; python and "
        "rust both run it",
        router_backend);
  }
  if (nats_flag->count() == 0) {
    if (const char* env = std::getenv("NATS_SERVER"); env != nullptr && *env != '\0') {
      opt.nats_server = env;
    }
  }
  if (!opt.tokenizer_path.empty()) {
    auto resolved = infera::tokenizer::ResolveModelPath(opt.tokenizer_path);
    if (!resolved.ok()) {
      spdlog::error("--router-tokenizer-path {}", std::string(resolved.status().message()));
      return 2;
    }
    if (resolved->source == "hub-cache") {
      spdlog::info("router: tokenizer {} -> {} (Hugging Face hub cache)", opt.tokenizer_path,
                   resolved->path);
    }
    opt.tokenizer_path = resolved->path;
  }
  auto parsed_policy = infera::core::ParsePolicy(policy);
  if (!parsed_policy.ok()) {
    spdlog::error("--router-policy: {}", parsed_policy.status().ToString());
    return 2;
  }
  opt.policy.policy = *parsed_policy;
  auto parsed_term = infera::core::ParseLoadTerm(load_term);
  if (!parsed_term.ok()) {
    spdlog::error("--load-term: {}", parsed_term.status().ToString());
    return 2;
  }
  opt.policy.load_term = *parsed_term;
  auto parsed_release = infera::router::ParsePdGuardRelease(pd_guard_release);
  if (!parsed_release.ok()) {
    spdlog::error("{}", parsed_release.status().ToString());
    return 2;
  }
  opt.pd.prefill_guard_release = *parsed_release;
  auto parsed_sessions = infera::core::ParseSessionMode(session_affinity);
  if (!parsed_sessions.ok()) {
    spdlog::error("{}", std::string(parsed_sessions.status().message()));
    return 2;
  }
  opt.sessions.mode = *parsed_sessions;
  if (!(session_ttl_s > 0 && session_ttl_s <= 1e9)) {
    spdlog::error("--session-affinity-ttl-s must be > 0 and at most 1e9");
    return 2;
  }
  opt.sessions.ttl_ns = static_cast<int64_t>(session_ttl_s * 1e9);
  if (absl::Status s = opt.sessions.Validate(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  auto flag_or_env = [](const CLI::Option* flag, const std::string& value,
                        const char* env) -> std::optional<std::string> {
    if (flag->count() > 0) return value;
    if (const char* v = std::getenv(env)) return std::string(v);
    return std::nullopt;
  };
  auto demand = infera::router::ParseDemandOptions(
      flag_or_env(demand_flag, demand_mode, "INFERA_DECODE_INPUT_DEMAND"),
      flag_or_env(weight_flag, demand_weight, "INFERA_DECODE_REQUEST_WEIGHT"), opt.policy.policy);
  if (!demand.ok()) {
    spdlog::error("{}", std::string(demand.status().message()));
    return 2;
  }
  opt.demand = *demand;
  if (prefill_w >= 0) opt.policy.prefill_overlap_weight = prefill_w;
  if (decode_w >= 0) opt.policy.decode_overlap_weight = decode_w;
  if (absl::Status s = opt.policy.Validate(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 2;
  }
  if (kv_transport != "zmq" && kv_transport != "nats" && kv_transport != "none") {
    spdlog::error("--kv-event-transport must be zmq, nats or none");
    return 2;
  }
  if (!std::isfinite(approx_ttl_s) || approx_ttl_s < 0 || approx_ttl_s > 1e9) {
    spdlog::error("--approx-ttl-s must be a number of seconds >= 0");
    return 2;
  }
  if (opt.approx.max_blocks == 0) {
    spdlog::error("--approx-max-blocks must be >= 1");
    return 2;
  }
  opt.approx.ttl_ns = static_cast<int64_t>(approx_ttl_s * 1e9);
  if (!std::isfinite(parity_interval_s) || parity_interval_s > 1e9 ||
      (parity_interval_s != 0 && !(parity_interval_s >= 0.01))) {
    spdlog::error("--render-parity-interval-s must be 0 (only at discovery) or seconds >= 0.01");
    return 2;
  }
  opt.render_parity.interval_ns = static_cast<int64_t>(parity_interval_s * 1e9);
  if (request_transport != "http" && request_transport != "nats") {
    spdlog::error("--request-transport must be http or nats, got '{}'", request_transport);
    return 2;
  }
  auto nats_timeouts = nats_request_flags.Resolve();
  if (!nats_timeouts.ok()) {
    spdlog::error("{}", std::string(nats_timeouts.status().message()));
    return 2;
  }
  if (nats_pending_flag->count() == 0) {
    if (const char* v = std::getenv("INFERA_NATS_REQ_MAX_PENDING"); v != nullptr && *v != '\0') {
      nats_max_pending = std::strcmp(v, "0") == 0 ? 0 : 1;
    }
  }
  if (nats_max_pending != 0) {
    spdlog::error(
        "--nats-req-max-pending (INFERA_NATS_REQ_MAX_PENDING): Infera's JetStream admission "
        "throttle is not supported by this router; only 0 (off, core NATS) is");
    return 2;
  }
  if (request_transport == "nats") {
    infera::router::NatsUpstreamOptions nats_requests;
    nats_requests.nats_url = opt.nats_server;
    nats_requests.idle_timeout_ms = nats_timeouts->idle_timeout_ms;
    nats_requests.max_duration_ms = nats_timeouts->max_duration_ms;
    if (absl::Status s = infera::router::ValidateNatsUpstreamOptions(nats_requests); !s.ok()) {
      spdlog::error("{}", std::string(s.message()));
      return 2;
    }
    opt.nats_requests = nats_requests;
  }
  if (port < 0 || port > 65535) {
    spdlog::error("--port out of range");
    return 2;
  }
  if (opt.server.max_connections < 0) {
    spdlog::error("--max-connections must be >= 0");
    return 2;
  }
  if (replica_sync) {
    std::random_device rd;
    if (replica.replica_id.empty()) replica.replica_id = infera::router::DefaultReplicaId(rd());
    // A restarted replica that keeps its id starts a newer epoch.
    replica.epoch = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              std::chrono::system_clock::now().time_since_epoch())
                                              .count());
    replica.nats_url = opt.nats_server;
    if (absl::Status s = infera::router::ValidateReplicaSyncOptions(replica); !s.ok()) {
      spdlog::error("{}", std::string(s.message()));
      return 2;
    }
    opt.replica_sync = replica;
  }
  if (seed_flag->count() > 0) opt.random_seed = random_seed;
  if (bound_flag->count() > 0) opt.max_index_blocks = max_index_blocks;
  opt.kv_events = kv_transport == "zmq";
  opt.kv_events_nats = kv_transport == "nats";
  opt.server.host = host;
  opt.server.port = static_cast<uint16_t>(port);
  opt.server.max_body_bytes = max_body;
  opt.server.max_header_bytes = max_header;

  if (selector_flag->count() == 0) {
    if (const char* env = std::getenv("INFERA_K8S_LABEL_SELECTOR")) dcfg.k8s_label_selector = env;
  }
  dcfg.backend = discovery_backend;
  dcfg.worker_flags = worker_flags;
  dcfg.workers_file = workers_file;
  dcfg.etcd_endpoint = etcd_endpoint;
  dcfg.etcd_prefix = etcd_prefix;
  auto created = infera::discovery::CreateDiscovery(dcfg);
  if (!created.ok()) {
    spdlog::error("{}", created.status().ToString());
    return 2;
  }
  std::unique_ptr<infera::discovery::Discovery> discovery = *std::move(created);

  // Block SIGINT/SIGTERM in every thread; the main thread waits for them.
  sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  infera::router::Router router(opt);
  if (absl::Status s = router.Start(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  if (absl::Status s = discovery->Start(router.Callbacks()); !s.ok()) {
    spdlog::error("discovery: {}", s.ToString());
    return 1;
  }
  spdlog::info("infera-router listening on {}:{} policy={} discovery={}", host, router.port(),
               policy, discovery_backend);
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: draining", sig);
  router.Shutdown();
  discovery->Stop();
  spdlog::info("stopped");
  return 0;
}
