// infera-router: flags -> RouterOptions, discovery -> Router callbacks, signals.
// `infera-router render ...` renders chat templates (src/template/render_command.h);
// `infera-router doctor ...` checks a fleet (src/doctor/doctor_command.h).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string_view>

#include "discovery/discovery_factory.h"
#include "discovery/discovery_flags.h"
#include "doctor/doctor_command.h"
#include "doctor/startup_doctor.h"
#include "router/admin/admin_auth.h"
#include "router/config_file.h"
#include "router/admin/log_levels.h"
#include "router/router.h"
#include "router/request/tenant_salt.h"
#include "spdlog/spdlog.h"
#include "template/render_command.h"
#include "tokenizer/model_path.h"
#include "transport/nats_request_flags.h"

namespace {

// --help's footer and doc/router.md "Configuration file" (the config test loads both).
constexpr char kConfigFooter[] =
    R"(Configuration file (--config FILE, TOML): each key is a flag's long name without
"--"; flags on the command line override the file, the file overrides environment
variables (INFERA_ADMIN_TOKEN, NATS_SERVER, RUST_LOG, ...). An unknown key, a key set
twice or malformed TOML is an error naming its line. Example:

  # /etc/infera-router/config.toml
  host = "0.0.0.0"
  port = 8000
  router-policy = "kv-aware"
  kv-overlap-weight = 1.0
  router-tokenizer-path = "/models/tokenizer"
  worker = ["http://10.0.0.1:30000,model_name=m,kv_events_endpoint=tcp://10.0.0.1:5557",
            "http://10.0.0.2:30000,model_name=m,kv_events_endpoint=tcp://10.0.0.2:5557"]
  kv-events-topic = "kv-events"
  admin-token-file = "/etc/infera-router/admin-token"
  log-level = "info"
)";

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
  if (argc >= 2 && std::strcmp(argv[1], "doctor") == 0) {
    return infera::doctor::RunDoctorCommand(argc, argv);
  }
  using infera::router::RouterOptions;
  RouterOptions opt;
  CLI::App app{
      "infera-router: KV-cache-aware router for LLM inference workers (OpenAI and Anthropic "
      "HTTP API).\nSubcommands: `infera-router render --help` renders chat templates; "
      "`infera-router doctor --help` checks a fleet for the causes of missing cache hits."};
  std::string host = "0.0.0.0";
  int port = 8000;
  std::string policy = "kv-aware";
  std::string load_term = "work";
  double prefill_w = -1, decode_w = -1;
  infera::discovery::DiscoveryConfig dcfg;
  dcfg.backend = "static";
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
  app.add_option("--router-policy", policy,
                 "kv-aware | round-robin | random | least-load | dynamo | lmetric | llm-d | "
                 "sglang (the last four: the peers' policies for A/B, doc/peers.md)")
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
  app.add_option("--kv-pressure-threshold", opt.policy.kv_pressure_threshold,
                 "work load term: a worker's KV use (fraction of its capacity) above which "
                 "in-flight blocks cost (doc/selection.md)")
      ->capture_default_str();
  app.add_option("--load-queue-scaling", opt.policy.load_queue_scaling,
                 "work load term: divide it by 1 + the candidates' mean requests in prefill, "
                 "so a miss weighs 1 / (1 - utilisation) (true/false)")
      ->capture_default_str();
  app.add_option("--kv-pressure-slope", opt.policy.kv_pressure_slope,
                 "work load term: cost per in-flight block above --kv-pressure-threshold "
                 "(0: no KV pressure term)")
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
                 "Threads rendering and tokenizing prompts of 16 KiB and more, and parsing "
                 "and translating request bodies of 16 KiB and more, off the event loops "
                 "(0: max(1, cores / 2))")
      ->capture_default_str();
  CLI::Option* seed_flag =
      app.add_option("--router-random-seed", random_seed,
                     "Seed of --router-policy random (default: from the OS, logged at start)");
  double parity_interval_s = 300;
  app.add_option("--render-parity-interval-s", parity_interval_s,
                 "Re-probe every worker's /tokenize this often to check it renders chats like "
                 "the router (workers are probed when discovered; 0: only then)")
      ->capture_default_str();
  infera::discovery::AddDiscoveryFlags(app, dcfg);
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
                 "/ready answers 503 \"starting\" until the KV views are first rebuilt at start "
                 "(engines' replay sockets, or the JetStream stream); /health never waits")
      ->capture_default_str();
  app.add_flag("--route-receipt", opt.route_receipt,
               "Answers carry X-Infera-Route: the chosen target, role, cache_hits, "
               "request_blocks, the cost terms and the runner-up's cost (doc/router.md)");
  app.add_option("--kv-events-topic", opt.kv_events_topic,
                 "ZMQ subscription topic prefix (empty: all)");
  std::string tenant_salt_spec, tenant_salt_key_file;
  app.add_option("--tenant-cache-salt", tenant_salt_spec,
                 "header:NAME: each request gets its tenant's cache_salt (a keyed hash of "
                 "header NAME, e.g. Authorization), so tenants neither probe nor share each "
                 "other's prefix caches (off by default; doc/router.md \"Tenant isolation\")");
  app.add_option("--tenant-cache-salt-key-file", tenant_salt_key_file,
                 "Secret key of --tenant-cache-salt (at least 16 bytes; the same on every "
                 "replica); default: random per process");
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
                 "Consecutive failures that open a worker's circuit breaker (0: no breaker)")
      ->capture_default_str();
  app.add_option("--breaker-cooldown-ms", opt.breaker_cooldown_ms,
                 "Open-breaker time before a half-open probe")
      ->capture_default_str();
  // Health and readiness, the first-byte timeout, the breaker's backoff, and Infera's
  // names of the breaker and retry flags (doc/router.md "Health and readiness",
  // "Active health checks", "First-byte timeout", "Circuit breaker").
  app.add_option("--health-check-interval-ms", opt.health_check.interval_ms,
                 "Probe every worker's health endpoint this often (0: no health checks)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  app.add_option("--health-check-timeout-ms", opt.health_check.timeout_ms,
                 "A probe with no answer this long fails")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}));
  app.add_option("--health-check-failures", opt.health_check.thresholds.unhealthy_after,
                 "Failed probes in a row that take a worker out of picks (and fail over the "
                 "requests waiting on it for a first byte)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--health-check-successes", opt.health_check.thresholds.healthy_after,
                 "Passed probes in a row that bring it back")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--health-check-path", opt.health_check.path,
                 "The workers' health endpoint (an answer below 500 passes)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& path) {
            return path.starts_with("/") ? std::string() : std::string("must start with /");
          },
          "PATH"));
  app.add_option("--first-byte-timeout-ms", opt.first_byte_timeout_ms,
                 "A streaming request whose worker sent no answer head this long after the "
                 "request fails over to another worker, counted as a breaker failure (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  app.add_option("--breaker-max-cooldown-ms", opt.breaker_max_cooldown_ms,
                 "Each failed half-open probe doubles the breaker's cooldown up to this")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  auto seconds_to_ms = [](int64_t& ms) { return [&ms](double s) { ms = std::llround(s * 1000); }; };
  app.add_option("--breaker-failure-threshold", opt.breaker_failures,
                 "Infera's name for --breaker-failures (0: no breaker)")
      ->check(CLI::Range(0u, 1'000'000u))
      ->excludes(app.get_option("--breaker-failures"));
  app.add_option_function<double>("--breaker-cooldown-s", seconds_to_ms(opt.breaker_cooldown_ms),
                                  "Infera's --breaker-cooldown-ms in seconds")
      ->check(CLI::Range(0.0, 86'400.0))
      ->excludes(app.get_option("--breaker-cooldown-ms"));
  app.add_option_function<double>("--breaker-max-cooldown-s",
                                  seconds_to_ms(opt.breaker_max_cooldown_ms),
                                  "Infera's --breaker-max-cooldown-ms in seconds")
      ->check(CLI::Range(0.0, 86'400.0))
      ->excludes(app.get_option("--breaker-max-cooldown-ms"));
  app.add_option_function<int>(
         "--request-max-retries", [&opt](int retries) { opt.max_attempts = retries + 1; },
         "Infera's retry count: other workers tried after the first before its first byte "
         "(--max-attempts = N + 1; 0: no failover)")
      ->check(CLI::Range(0, 1000))
      ->excludes(app.get_option("--max-attempts"));
  app.add_option("--max-body-bytes", max_body, "Request body limit (413 above)")
      ->capture_default_str();
  app.add_option("--max-header-bytes", max_header, "Request header limit (431 above)")
      ->capture_default_str();
  app.add_option("--max-sse-event-bytes", opt.max_sse_event_bytes,
                 "Largest SSE event relayed from a worker; past it the stream ends with an "
                 "in-band error event")
      ->capture_default_str();
  app.add_option("--max-translated-response-bytes", opt.max_translated_response_bytes,
                 "Largest non-streamed worker answer translated for /v1/messages (502 above)")
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
  infera::doctor::StartupDoctorOptions startup_doctor_options;
  infera::doctor::AddStartupDoctorFlags(app, startup_doctor_options);
  // --admin-token (doc/router.md "Admin token").
  std::string admin_token, admin_token_file;
  bool protect_metrics = false;
  CLI::Option* token_flag = app.add_option(
      "--admin-token", admin_token,
      "Bearer token that /v1/admin/*, /v1/workers and /dashboard require (env "
      "INFERA_ADMIN_TOKEN; default: none, open). A command line is visible to every user "
      "of the machine: prefer --admin-token-file or the environment");
  CLI::Option* token_file_flag =
      app.add_option("--admin-token-file", admin_token_file,
                     "File holding the admin token (trailing newline ignored)");
  app.add_flag("--protect-metrics", protect_metrics,
               "/metrics requires the admin token too (default: open to scrapers)");
  // --config FILE (doc/router.md "Configuration file").
  CLI::Option* config_flag =
      app.set_config("--config", "", "TOML file of flags (see the end of this help)")
          ->type_name("FILE");
  app.config_formatter(std::make_shared<infera::router::StrictTomlConfig>(app));
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.footer(kConfigFooter);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    spdlog::error("--config {}: {}", config_flag->as<std::string>(), e.what());
    return 2;
  } catch (const CLI::FileError& e) {
    spdlog::error("--config: {}", e.what());
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

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
  if (!tenant_salt_spec.empty()) {
    auto header = infera::router::ParseTenantSaltSpec(tenant_salt_spec);
    if (!header.ok()) {
      spdlog::error("{}", std::string(header.status().message()));
      return 2;
    }
    opt.tenant_salt_header = *header;
    if (!tenant_salt_key_file.empty()) {
      auto key = infera::router::ReadTenantSaltKeyFile(tenant_salt_key_file);
      if (!key.ok()) {
        spdlog::error("{}", std::string(key.status().message()));
        return 2;
      }
      opt.tenant_salt_key = *key;
    } else {
      std::random_device rd;
      for (int i = 0; i < 8; ++i) {
        const uint32_t v = rd();
        opt.tenant_salt_key.append(reinterpret_cast<const char*>(&v), sizeof(v));
      }
      spdlog::warn(
          "--tenant-cache-salt without --tenant-cache-salt-key-file: a random key; tenants' "
          "salts change when the router restarts and differ between replicas");
    }
  } else if (!tenant_salt_key_file.empty()) {
    spdlog::error("--tenant-cache-salt-key-file needs --tenant-cache-salt");
    return 2;
  }
  // Both given: the command line's beats the config file's; twice in one place is an
  // error (CLI11's excludes() cannot tell the two places apart).
  bool use_token_file = token_file_flag->count() > 0;
  if (use_token_file && token_flag->count() > 0) {
    auto on_command_line = [&](std::string_view name) {
      for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == name || (arg.starts_with(name) && arg[name.size()] == '=')) return true;
      }
      return false;
    };
    const bool file_cli = on_command_line("--admin-token-file");
    if (file_cli == on_command_line("--admin-token")) {
      spdlog::error("give only one of --admin-token and --admin-token-file");
      return 2;
    }
    use_token_file = file_cli;
  }
  if (use_token_file) {
    auto token = infera::router::ReadAdminTokenFile(admin_token_file);
    if (!token.ok()) {
      spdlog::error("{}", std::string(token.status().message()));
      return 2;
    }
    opt.admin_token = *std::move(token);
  } else if (token_flag->count() > 0) {
    opt.admin_token = admin_token;
  } else if (const char* env = std::getenv("INFERA_ADMIN_TOKEN"); env != nullptr && *env != '\0') {
    opt.admin_token = env;
  }
  // --admin-token "" is an error, not "off".
  if (!opt.admin_token.empty() || (token_flag->count() > 0 && !use_token_file)) {
    if (absl::Status s = infera::router::ValidateAdminToken(opt.admin_token); !s.ok()) {
      spdlog::error("--admin-token (or INFERA_ADMIN_TOKEN): {}", std::string(s.message()));
      return 2;
    }
    spdlog::info("router: admin token set: /v1/admin/*, /v1/workers, /dashboard{} need it",
                 protect_metrics ? " and /metrics" : "");
  } else if (protect_metrics) {
    spdlog::error(
        "--protect-metrics needs an admin token (--admin-token, --admin-token-file or "
        "INFERA_ADMIN_TOKEN)");
    return 2;
  } else if (!infera::router::IsLoopbackHost(host)) {
    spdlog::warn(
        "router: no admin token and listening on {}: /v1/admin/*, /v1/workers and /dashboard "
        "(the fleet's internal URLs and endpoints) are open to every client that reaches it; "
        "set --admin-token-file or INFERA_ADMIN_TOKEN",
        host);
  }
  opt.protect_metrics = protect_metrics;
  if (seed_flag->count() > 0) opt.random_seed = random_seed;
  if (bound_flag->count() > 0) opt.max_index_blocks = max_index_blocks;
  opt.kv_events = kv_transport == "zmq";
  opt.kv_events_nats = kv_transport == "nats";
  opt.server.host = host;
  opt.server.port = static_cast<uint16_t>(port);
  opt.server.max_body_bytes = max_body;
  opt.server.max_header_bytes = max_header;

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
               policy, dcfg.backend);
  auto startup_doctor = infera::doctor::StartupDoctor::Start(
      startup_doctor_options, dcfg, {opt.tokenizer_path, opt.kv_events_topic, kv_transport});
  if (!startup_doctor.ok()) spdlog::warn("doctor: {}", startup_doctor.status().ToString());
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: draining", sig);
  if (startup_doctor.ok()) startup_doctor->reset();
  router.Shutdown();
  discovery->Stop();
  spdlog::info("stopped");
  return 0;
}
