// The table of validation steps (validate.h) and the steps of the routing decision,
// the KV views and the transports; identity, tenants and the admin token are in
// validate_access.cc.
#include "router/config/validate.h"

#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "router/admin/log_levels.h"
#include "spdlog/spdlog.h"
#include "tokenizer/model_path.h"

namespace infera::router::config {
namespace {

absl::Status ResolveLogging(RouterFlags& f, const ConfigSources& sources) {
  const std::optional<std::string> rust_log = sources.env("RUST_LOG");
  auto levels = ResolveLogLevels(
      f.log_flag->count() > 0 ? std::optional<std::string>(f.log_level) : std::nullopt,
      rust_log ? rust_log->c_str() : nullptr);
  if (!levels.ok()) return FlagError(MessageOf(levels.status()));
  ApplyLogLevels(*levels);
  for (const std::string& target : levels->ignored) {
    spdlog::warn(
        "{}: log target '{}' is a crate of Infera's Rust router, not part of this one: "
        "ignored",
        levels->source, target);
  }
  return absl::OkStatus();
}

absl::Status ResolveBackend(RouterFlags& f, const ConfigSources& sources) {
  if (f.backend_flag->count() == 0) {
    if (auto env = sources.NonEmptyEnv("INFERA_ROUTER_BACKEND")) f.router_backend = *env;
  }
  if (f.router_backend.empty()) return absl::OkStatus();
  if (f.router_backend != "python" && f.router_backend != "rust") {
    return FlagError("--router-backend (or INFERA_ROUTER_BACKEND) must be python or rust, got '" +
                     f.router_backend + "'");
  }
  spdlog::info(
      "router: --router-backend {}: infera-router has one native (C++) data plane; python and "
      "rust both run it",
      f.router_backend);
  return absl::OkStatus();
}

absl::Status ResolveNatsServer(RouterFlags& f, const ConfigSources& sources) {
  if (f.nats_flag->count() == 0) {
    if (auto env = sources.NonEmptyEnv("NATS_SERVER")) f.options.nats_server = *env;
  }
  return absl::OkStatus();
}

absl::Status ResolveTokenizer(RouterFlags& f, const ConfigSources&) {
  std::string& path = f.options.tokenizer_path;
  if (path.empty()) return absl::OkStatus();
  auto resolved = tokenizer::ResolveModelPath(path);
  if (!resolved.ok()) return FlagError("--router-tokenizer-path " + MessageOf(resolved.status()));
  if (resolved->source == "hub-cache") {
    spdlog::info("router: tokenizer {} -> {} (Hugging Face hub cache)", path, resolved->path);
  }
  path = resolved->path;
  return absl::OkStatus();
}

absl::Status ParsePolicyFlags(RouterFlags& f, const ConfigSources&) {
  auto policy = core::ParsePolicy(f.policy);
  if (!policy.ok()) return FlagError("--router-policy: " + policy.status().ToString());
  f.options.policy.policy = *policy;
  auto term = core::ParseLoadTerm(f.load_term);
  if (!term.ok()) return FlagError("--load-term: " + term.status().ToString());
  f.options.policy.load_term = *term;
  auto release = ParsePdGuardRelease(f.pd_guard_release);
  if (!release.ok()) return FlagError(release.status().ToString());
  f.options.pd.prefill_guard_release = *release;
  return absl::OkStatus();
}

absl::Status ParseSessionFlags(RouterFlags& f, const ConfigSources&) {
  auto mode = core::ParseSessionMode(f.session_affinity);
  if (!mode.ok()) return FlagError(MessageOf(mode.status()));
  f.options.sessions.mode = *mode;
  if (!(f.session_ttl_s > 0 && f.session_ttl_s <= 1e9)) {
    return FlagError("--session-affinity-ttl-s must be > 0 and at most 1e9");
  }
  f.options.sessions.ttl_ns = static_cast<int64_t>(f.session_ttl_s * 1e9);
  if (absl::Status s = f.options.sessions.Validate(); !s.ok()) return FlagError(MessageOf(s));
  return absl::OkStatus();
}

absl::Status ParseDecodeDemand(RouterFlags& f, const ConfigSources& sources) {
  auto flag_or_env = [&](const CLI::Option* flag, const std::string& value,
                         const char* env) -> std::optional<std::string> {
    if (flag->count() > 0) return value;
    return sources.env(env);
  };
  auto demand = ParseDemandOptions(
      flag_or_env(f.demand_flag, f.demand_mode, "INFERA_DECODE_INPUT_DEMAND"),
      flag_or_env(f.weight_flag, f.demand_weight, "INFERA_DECODE_REQUEST_WEIGHT"),
      f.options.policy.policy);
  if (!demand.ok()) return FlagError(MessageOf(demand.status()));
  f.options.demand = *demand;
  return absl::OkStatus();
}

absl::Status ResolveOverlapWeights(RouterFlags& f, const ConfigSources&) {
  core::PolicyConfig& policy = f.options.policy;
  if (f.prefill_overlap_weight >= 0) policy.prefill_overlap_weight = f.prefill_overlap_weight;
  if (f.decode_overlap_weight >= 0) policy.decode_overlap_weight = f.decode_overlap_weight;
  if (absl::Status s = policy.Validate(); !s.ok()) return FlagError(s.ToString());
  return absl::OkStatus();
}

absl::Status ParseKvViewFlags(RouterFlags& f, const ConfigSources&) {
  if (f.kv_transport != "zmq" && f.kv_transport != "nats" && f.kv_transport != "none") {
    return FlagError("--kv-event-transport must be zmq, nats or none");
  }
  if (!std::isfinite(f.approx_ttl_s) || f.approx_ttl_s < 0 || f.approx_ttl_s > 1e9) {
    return FlagError("--approx-ttl-s must be a number of seconds >= 0");
  }
  if (f.options.approx.max_blocks == 0) return FlagError("--approx-max-blocks must be >= 1");
  const int shards = f.options.kv_ingest_threads;
  if (shards < 1 || shards > 64) return FlagError("--kv-ingest-threads must be 1 to 64");
  if (shards > 1 && f.kv_transport != "zmq") {
    return FlagError("--kv-ingest-threads > 1 needs --kv-event-transport zmq");
  }
  if (shards > 1 && f.options.kv_snapshot.enabled()) {  // doc/kv-events.md "Sharded ingestion"
    return FlagError(
        "--kv-ingest-threads > 1 does not work with --kv-snapshot-path yet: one snapshot "
        "across ingestion shards is not built; use 1 thread or no snapshots");
  }
  f.options.approx.ttl_ns = static_cast<int64_t>(f.approx_ttl_s * 1e9);
  const double parity_s = f.parity_interval_s;
  if (!std::isfinite(parity_s) || parity_s > 1e9 || (parity_s != 0 && !(parity_s >= 0.01))) {
    return FlagError("--render-parity-interval-s must be 0 (only at discovery) or seconds >= 0.01");
  }
  f.options.render_parity.interval_ns = static_cast<int64_t>(parity_s * 1e9);
  return absl::OkStatus();
}

absl::Status ParseRequestTransport(RouterFlags& f, const ConfigSources& sources) {
  if (f.request_transport != "http" && f.request_transport != "nats") {
    return FlagError("--request-transport must be http or nats, got '" + f.request_transport + "'");
  }
  std::map<std::string, std::optional<std::string>> read;  // keeps the values alive
  auto timeouts = f.nats_request_flags.Resolve([&](const char* name) -> const char* {
    const auto& value = read.emplace(name, sources.env(name)).first->second;
    return value ? value->c_str() : nullptr;
  });
  if (!timeouts.ok()) return FlagError(MessageOf(timeouts.status()));
  if (f.nats_pending_flag->count() == 0) {
    if (auto env = sources.NonEmptyEnv("INFERA_NATS_REQ_MAX_PENDING")) {
      f.nats_max_pending = *env == "0" ? 0 : 1;
    }
  }
  if (f.nats_max_pending != 0) {
    return FlagError(
        "--nats-req-max-pending (INFERA_NATS_REQ_MAX_PENDING): Infera's JetStream admission "
        "throttle is not supported by this router; only 0 (off, core NATS) is");
  }
  if (f.request_transport != "nats") return absl::OkStatus();
  NatsUpstreamOptions nats_requests;
  nats_requests.nats_url = f.options.nats_server;
  nats_requests.idle_timeout_ms = timeouts->idle_timeout_ms;
  nats_requests.max_duration_ms = timeouts->max_duration_ms;
  if (absl::Status s = ValidateNatsUpstreamOptions(nats_requests); !s.ok()) {
    return FlagError(MessageOf(s));
  }
  f.options.nats_requests = nats_requests;
  return absl::OkStatus();
}

absl::Status CheckServerFlags(RouterFlags& f, const ConfigSources&) {
  if (f.port < 0 || f.port > 65535) return FlagError("--port out of range");
  if (f.options.server.max_connections < 0) {
    return FlagError("--max-connections must be >= 0");
  }
  return absl::OkStatus();
}

// The flags that need no check, moved into the options.
absl::Status FinishOptions(RouterFlags& f, const ConfigSources&) {
  RouterOptions& o = f.options;
  o.protect_metrics = f.protect_metrics;
  if (f.seed_flag->count() > 0) o.random_seed = f.random_seed;
  if (f.bound_flag->count() > 0) o.max_index_blocks = f.max_index_blocks;
  o.kv_events = f.kv_transport == "zmq";
  o.kv_events_nats = f.kv_transport == "nats";
  o.server.host = f.host;
  o.server.port = static_cast<uint16_t>(f.port);
  o.server.max_body_bytes = f.max_body_bytes;
  o.server.max_header_bytes = f.max_header_bytes;
  return absl::OkStatus();
}

// The validation steps, in order: a step may read what an earlier one resolved (the
// policy, --nats-server). A new check is one entry here.
constexpr ValidationStep kValidationSteps[] = {
    {"--log-level, RUST_LOG", ResolveLogging},
    {"--router-backend, INFERA_ROUTER_BACKEND", ResolveBackend},
    {"--nats-server, NATS_SERVER", ResolveNatsServer},
    {"--router-tokenizer-path", ResolveTokenizer},
    {"--router-policy, --load-term, --pd-prefill-guard-release", ParsePolicyFlags},
    {"--session-affinity*", ParseSessionFlags},
    {"--decode-input-demand, --decode-request-weight (and env)", ParseDecodeDemand},
    {"--kv-*-overlap-weight, the cost terms", ResolveOverlapWeights},
    {"--kv-event-transport, --kv-ingest-threads, --approx-*, --render-parity-interval-s",
     ParseKvViewFlags},
    {"--request-transport, --nats-req-*", ParseRequestTransport},
    {"--port, --max-connections", CheckServerFlags},
    {"--router-replica-*", ResolveReplicaSync},
    {"--tenant-cache-salt*", ResolveTenantSalt},
    {"--admin-token*, --protect-metrics, INFERA_ADMIN_TOKEN", ResolveAdminToken},
    {"the rest", FinishOptions},
    {"--admission-queue, --queue-* (after the policy)", ParseAdmissionFlags},
    {"--kv-snapshot-*", ResolveKvSnapshot},
};

}  // namespace

absl::Status FlagError(std::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

std::string MessageOf(const absl::Status& status) { return std::string(status.message()); }

absl::Status ValidateRouterFlags(RouterFlags& flags, const ConfigSources& sources) {
  for (const ValidationStep& step : kValidationSteps) {
    if (absl::Status s = step.run(flags, sources); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace infera::router::config
