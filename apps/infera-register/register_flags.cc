#include "register_flags.h"

#include "discovery/disagg_meta.h"
#include "nlohmann/json.hpp"

namespace infera::registrar {
namespace {

// The record's fields.
void AddRecordFlags(CLI::App& app, RegisterFlags& f) {
  app.add_option("--record-json", f.record_json,
                 "the whole worker record as JSON (instead of the field flags)");
  app.add_option("--worker-id", f.worker_id, "worker id, host:port (default: from --url)");
  app.add_option("--url", f.url, "the worker's base URL, http://host:port");
  app.add_option("--model-name", f.model_name, "served model name");
  app.add_option("--engine", f.engine, "sglang | vllm | atom | mock")->capture_default_str();
  app.add_option("--disagg-mode", f.disagg_mode, "mixed | prefill | decode")->capture_default_str();
  app.add_option("--disagg-protocol", f.disagg_protocol,
                 discovery::JoinPdProtocolNames(" | ", " | ") + " (PD workers)");
  app.add_option("--bootstrap-host", f.bootstrap_host,
                 "sglang-bootstrap prefill: bootstrap host (default: the --url host)");
  app.add_option("--bootstrap-port", f.bootstrap_port,
                 "sglang-bootstrap prefill: bootstrap port (default: 8998)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--bootstrap-addr", f.bootstrap_addr,
                 "vllm-mooncake prefill: bootstrap server host:port (default: url host:8998)");
  app.add_option("--engine-id", f.engine_id, "vllm-mooncake prefill: kv_transfer_config.engine_id");
  app.add_option("--kv-events-endpoint", f.kv_events_endpoint,
                 "ZMQ PUB endpoint of rank 0's KV events, tcp://host:port (rank r: port + r)");
  app.add_option("--kv-replay-endpoint", f.kv_replay_endpoint, "ZMQ ROUTER replay endpoint");
  app.add_option("--kv-block-size", f.kv_block_size, "KV block (page) size")->capture_default_str();
  app.add_option("--dp-rank", f.dp_rank, "first data-parallel rank")->capture_default_str();
  app.add_option("--dp-size", f.dp_size, "number of data-parallel ranks")->capture_default_str();
  app.add_option("--num-gpu-blocks", f.num_gpu_blocks,
                 "KV capacity of each rank in blocks (vLLM's num_gpu_blocks; 0: unknown)")
      ->capture_default_str();
}

// etcd, the log level, the KV relay and NATS request serving.
void AddSidecarFlags(CLI::App& app, RegisterFlags& f) {
  app.add_option("--etcd-endpoint", f.etcd.client.endpoints, "etcd host:port[,host:port...]")
      ->capture_default_str();
  app.add_option("--etcd-prefix", f.etcd.prefix, "key prefix")->capture_default_str();
  app.add_option("--lease-ttl-s", f.etcd.lease_ttl_s, "lease TTL in seconds")
      ->capture_default_str();
  app.add_option("--keepalive-s", f.etcd.keepalive_interval_s, "keepalive interval in seconds")
      ->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace|debug|info|warn|error")->capture_default_str();
  app.add_option("--kv-relay", f.kv_relay,
                 "none | nats: republish the engine's ZMQ KV events to NATS JetStream")
      ->capture_default_str();
  f.nats_flag =
      app.add_option("--nats-server", f.relay_options.nats.url,
                     "NATS server URL(s), nats://host:port (without the flag: env NATS_SERVER)")
          ->capture_default_str();
  app.add_option("--request-transport", f.request_transport,
                 "http | nats: also serve this worker's NATS subject infera.req.<base64url("
                 "worker_id)> by proxying each request to --url (Infera's NatsRequestServer) "
                 "and register request_transport nats")
      ->capture_default_str();
  f.nats_request_flags.Add(app, transport::NatsRequestFlags::Side::kWorker);
  app.add_option("--drain-timeout", f.drain_s,
                 "--request-transport nats: on SIGTERM, after deregistering, let requests in "
                 "flight finish this many seconds before cancelling them")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--nats-stream-max-bytes", f.relay_options.limits.max_bytes,
                 "Size limit of stream INFERA_KV_EVENTS when the relay creates it (oldest "
                 "messages discarded)")
      ->capture_default_str();
  app.add_option("--nats-stream-max-msgs", f.relay_options.limits.max_msgs,
                 "Message limit of stream INFERA_KV_EVENTS when the relay creates it")
      ->capture_default_str();
  app.add_option("--kv-events-topic", f.kv_events_topic,
                 "ZMQ subscription topic prefix of the relay (empty: all)");
  app.add_flag("--relay-only", f.relay_only,
               "Relay KV events (--kv-relay nats) and/or serve NATS requests "
               "(--request-transport nats) only; register nothing (static discovery)");
}

// --k8s: the Pod annotation instead of etcd.
void AddKubeFlags(CLI::App& app, RegisterFlags& f) {
  app.add_flag("--k8s", f.k8s,
               "Register in this Pod's annotation infera.amd.com/worker-info (Kubernetes "
               "discovery) instead of etcd; removed on SIGTERM");
  app.add_option("--k8s-pod", f.k8s_options.pod_name, "--k8s: this Pod's name (default: POD_NAME)");
  app.add_option("--k8s-namespace", f.k8s_options.namespace_name,
                 "--k8s: this Pod's namespace (default: POD_NAMESPACE, else the service "
                 "account's)");
  app.add_option("--k8s-api-server", f.k8s_config.k8s_api_server,
                 "--k8s: API server URL (default: in-cluster)");
  app.add_option("--k8s-token-file", f.k8s_config.k8s_token_file,
                 "--k8s: bearer token file for --k8s-api-server");
  app.add_option("--k8s-ca-file", f.k8s_config.k8s_ca_file,
                 "--k8s: CA bundle (PEM) for an https --k8s-api-server");
  app.add_option("--k8s-service-account-dir", f.k8s_config.k8s_service_account_dir,
                 "--k8s, in-cluster: where token, ca.crt and namespace are mounted")
      ->capture_default_str();
  app.add_option("--k8s-refresh-s", f.k8s_options.refresh_s,
                 "--k8s: re-write the annotation this often (heals a stripped one)")
      ->capture_default_str();
}

}  // namespace

void AddRegisterFlags(CLI::App& app, RegisterFlags& flags) {
  AddRecordFlags(app, flags);
  AddSidecarFlags(app, flags);
  AddKubeFlags(app, flags);
}

void ApplyRegisterEnv(RegisterFlags& flags, const EnvLookup& getenv) {
  if (flags.nats_flag->count() == 0) {
    if (const char* env = getenv("NATS_SERVER"); env != nullptr && *env != '\0') {
      flags.relay_options.nats.url = env;
    }
  }
  if (!flags.k8s || flags.relay_only) return;
  discovery::KubeRegistrarOptions& k8s = flags.k8s_options;
  if (k8s.pod_name.empty()) {
    if (const char* env = getenv("POD_NAME")) k8s.pod_name = env;
  }
  if (k8s.namespace_name.empty()) {
    if (const char* env = getenv("POD_NAMESPACE"); env != nullptr && *env != '\0') {
      k8s.namespace_name = env;
    }
  }
}

absl::StatusOr<discovery::WorkerRecord> BuildRecord(const RegisterFlags& f) {
  if (!f.record_json.empty()) {
    if (!f.url.empty() || !f.worker_id.empty()) {
      return absl::InvalidArgumentError("give --record-json or the field flags, not both");
    }
    return discovery::ParseWorkerRecord(f.record_json);
  }
  nlohmann::json obj = {{"url", f.url},
                        {"model_name", f.model_name},
                        {"engine", f.engine},
                        {"disagg_mode", f.disagg_mode},
                        {"disagg_meta", {{"protocol", f.disagg_protocol}, {"params", {}}}},
                        {"kv_events_endpoint", f.kv_events_endpoint},
                        {"kv_replay_endpoint", f.kv_replay_endpoint},
                        {"kv_block_size", f.kv_block_size},
                        {"dp_rank", f.dp_rank},
                        {"dp_size", f.dp_size},
                        {"num_gpu_blocks", f.num_gpu_blocks}};
  nlohmann::json params = nlohmann::json::object();
  if (!f.bootstrap_host.empty()) params["bootstrap_host"] = f.bootstrap_host;
  if (f.bootstrap_port != 0) params["bootstrap_port"] = f.bootstrap_port;
  if (!f.bootstrap_addr.empty()) params["bootstrap_addr"] = f.bootstrap_addr;
  if (!f.engine_id.empty()) params["engine_id"] = f.engine_id;
  obj["disagg_meta"]["params"] = params;
  if (!f.worker_id.empty()) obj["worker_id"] = f.worker_id;
  return discovery::WorkerRecordFromJson(obj);
}

absl::Status CheckRegisterFlags(const RegisterFlags& f, const discovery::WorkerRecord& record) {
  if (f.kv_relay != "none" && f.kv_relay != "nats") {
    return absl::InvalidArgumentError("--kv-relay must be none or nats");
  }
  if (f.request_transport != "http" && f.request_transport != "nats") {
    return absl::InvalidArgumentError("--request-transport must be http or nats");
  }
  if (f.relay_only && f.kv_relay == "none" && f.request_transport == "http") {
    return absl::InvalidArgumentError(
        "--relay-only needs --kv-relay nats or --request-transport nats");
  }
  if (record.request_transport == "nats" && f.request_transport != "nats") {
    return absl::InvalidArgumentError(
        "the record says request_transport nats: serve it with --request-transport nats");
  }
  return absl::OkStatus();
}

}  // namespace infera::registrar
