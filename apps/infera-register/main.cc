// infera-register: the worker-side sidecar. Registers one worker record in etcd
// under a lease, keeps it alive, re-registers when the lease is lost, and revokes
// it on SIGTERM/SIGINT (exit 0); with --k8s it writes the record into its own Pod's
// annotation instead (and removes it on SIGTERM). See doc/discovery.md. With
// --kv-relay nats it also relays the engine's ZMQ KV events to NATS JetStream
// (doc/nats-transport.md). With --request-transport nats it serves the worker's NATS
// request subject by proxying to the engine's HTTP (Infera's NatsRequestServer;
// doc/nats-request-transport.md) and registers request_transport "nats".
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "discovery/discovery_factory.h"
#include "discovery/etcd_registrar.h"
#include "discovery/kube_registrar.h"
#include "discovery/worker_record.h"
#include "engine_events/nats_relay.h"
#include "event_wire/dp_endpoint.h"
#include "http/io_pool.h"
#include "http/url.h"
#include "nlohmann/json.hpp"
#include "transport/nats_request_flags.h"
#include "transport/nats_request_server.h"

namespace {

using infera::discovery::EtcdRegistrar;
using infera::discovery::EtcdRegistrarOptions;
using infera::discovery::WorkerRecord;

std::string Message(const absl::Status& s) {
  return std::string(s.message().data(), s.message().size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infera-register: registers a worker record in etcd under a lease"};
  std::string record_json, worker_id, url, model_name, engine = "vllm", disagg_mode = "mixed";
  std::string disagg_protocol, kv_events_endpoint, kv_replay_endpoint;
  std::string bootstrap_host, bootstrap_addr, engine_id;
  uint32_t bootstrap_port = 0;
  uint32_t kv_block_size = 16, dp_rank = 0, dp_size = 1, num_gpu_blocks = 0;
  EtcdRegistrarOptions options;
  std::string log_level = "info";
  std::string kv_relay = "none", kv_events_topic;
  infera::events::NatsRelayOptions relay_options;
  bool relay_only = false;
  app.add_option("--record-json", record_json,
                 "the whole worker record as JSON (instead of the field flags)");
  app.add_option("--worker-id", worker_id, "worker id, host:port (default: from --url)");
  app.add_option("--url", url, "the worker's base URL, http://host:port");
  app.add_option("--model-name", model_name, "served model name");
  app.add_option("--engine", engine, "sglang | vllm | atom | mock")->capture_default_str();
  app.add_option("--disagg-mode", disagg_mode, "mixed | prefill | decode")->capture_default_str();
  app.add_option("--disagg-protocol", disagg_protocol,
                 "sglang-bootstrap | vllm-nixl | vllm-mooncake (PD workers)");
  app.add_option("--bootstrap-host", bootstrap_host,
                 "sglang-bootstrap prefill: bootstrap host (default: the --url host)");
  app.add_option("--bootstrap-port", bootstrap_port,
                 "sglang-bootstrap prefill: bootstrap port (default: 8998)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--bootstrap-addr", bootstrap_addr,
                 "vllm-mooncake prefill: bootstrap server host:port (default: url host:8998)");
  app.add_option("--engine-id", engine_id, "vllm-mooncake prefill: kv_transfer_config.engine_id");
  app.add_option("--kv-events-endpoint", kv_events_endpoint,
                 "ZMQ PUB endpoint of rank 0's KV events, tcp://host:port (rank r: port + r)");
  app.add_option("--kv-replay-endpoint", kv_replay_endpoint, "ZMQ ROUTER replay endpoint");
  app.add_option("--kv-block-size", kv_block_size, "KV block (page) size")->capture_default_str();
  app.add_option("--dp-rank", dp_rank, "first data-parallel rank")->capture_default_str();
  app.add_option("--dp-size", dp_size, "number of data-parallel ranks")->capture_default_str();
  app.add_option("--num-gpu-blocks", num_gpu_blocks,
                 "KV capacity of each rank in blocks (vLLM's num_gpu_blocks; 0: unknown)")
      ->capture_default_str();
  app.add_option("--etcd-endpoint", options.client.endpoints, "etcd host:port[,host:port...]")
      ->capture_default_str();
  app.add_option("--etcd-prefix", options.prefix, "key prefix")->capture_default_str();
  app.add_option("--lease-ttl-s", options.lease_ttl_s, "lease TTL in seconds")
      ->capture_default_str();
  app.add_option("--keepalive-s", options.keepalive_interval_s, "keepalive interval in seconds")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  app.add_option("--kv-relay", kv_relay,
                 "none | nats: republish the engine's ZMQ KV events to NATS JetStream")
      ->capture_default_str();
  CLI::Option* nats_flag =
      app.add_option("--nats-server", relay_options.nats.url,
                     "NATS server URL(s), nats://host:port (without the flag: env NATS_SERVER)")
          ->capture_default_str();
  std::string request_transport = "http";
  double drain_s = 30;
  app.add_option("--request-transport", request_transport,
                 "http | nats: also serve this worker's NATS subject infera.req.<base64url("
                 "worker_id)> by proxying each request to --url (Infera's NatsRequestServer) "
                 "and register request_transport nats")
      ->capture_default_str();
  infera::transport::NatsRequestFlags nats_request_flags;
  nats_request_flags.Add(app, infera::transport::NatsRequestFlags::Side::kWorker);
  app.add_option("--drain-timeout", drain_s,
                 "--request-transport nats: on SIGTERM, after deregistering, let requests in "
                 "flight finish this many seconds before cancelling them")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--nats-stream-max-bytes", relay_options.limits.max_bytes,
                 "Size limit of stream INFERA_KV_EVENTS when the relay creates it (oldest "
                 "messages discarded)")
      ->capture_default_str();
  app.add_option("--nats-stream-max-msgs", relay_options.limits.max_msgs,
                 "Message limit of stream INFERA_KV_EVENTS when the relay creates it")
      ->capture_default_str();
  app.add_option("--kv-events-topic", kv_events_topic,
                 "ZMQ subscription topic prefix of the relay (empty: all)");
  app.add_flag("--relay-only", relay_only,
               "Relay KV events (--kv-relay nats) and/or serve NATS requests "
               "(--request-transport nats) only; register nothing (static discovery)");
  bool k8s = false;
  infera::discovery::DiscoveryConfig k8s_config;  // the client flags the router takes too
  infera::discovery::KubeRegistrarOptions k8s_options;
  app.add_flag("--k8s", k8s,
               "Register in this Pod's annotation infera.amd.com/worker-info (Kubernetes "
               "discovery) instead of etcd; removed on SIGTERM");
  app.add_option("--k8s-pod", k8s_options.pod_name, "--k8s: this Pod's name (default: POD_NAME)");
  app.add_option("--k8s-namespace", k8s_options.namespace_name,
                 "--k8s: this Pod's namespace (default: POD_NAMESPACE, else the service "
                 "account's)");
  app.add_option("--k8s-api-server", k8s_config.k8s_api_server,
                 "--k8s: API server URL (default: in-cluster)");
  app.add_option("--k8s-token-file", k8s_config.k8s_token_file,
                 "--k8s: bearer token file for --k8s-api-server");
  app.add_option("--k8s-ca-file", k8s_config.k8s_ca_file,
                 "--k8s: CA bundle (PEM) for an https --k8s-api-server");
  app.add_option("--k8s-service-account-dir", k8s_config.k8s_service_account_dir,
                 "--k8s, in-cluster: where token, ca.crt and namespace are mounted")
      ->capture_default_str();
  app.add_option("--k8s-refresh-s", k8s_options.refresh_s,
                 "--k8s: re-write the annotation this often (heals a stripped one)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help exits 0; every flag error exits 2
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (nats_flag->count() == 0) {
    if (const char* env = std::getenv("NATS_SERVER"); env != nullptr && *env != '\0') {
      relay_options.nats.url = env;
    }
  }

  absl::StatusOr<WorkerRecord> record;
  if (!record_json.empty()) {
    if (!url.empty() || !worker_id.empty()) {
      std::fprintf(stderr, "infera-register: give --record-json or the field flags, not both\n");
      return 2;
    }
    record = infera::discovery::ParseWorkerRecord(record_json);
  } else {
    nlohmann::json obj = {{"url", url},
                          {"model_name", model_name},
                          {"engine", engine},
                          {"disagg_mode", disagg_mode},
                          {"disagg_meta", {{"protocol", disagg_protocol}, {"params", {}}}},
                          {"kv_events_endpoint", kv_events_endpoint},
                          {"kv_replay_endpoint", kv_replay_endpoint},
                          {"kv_block_size", kv_block_size},
                          {"dp_rank", dp_rank},
                          {"dp_size", dp_size},
                          {"num_gpu_blocks", num_gpu_blocks}};
    nlohmann::json params = nlohmann::json::object();
    if (!bootstrap_host.empty()) params["bootstrap_host"] = bootstrap_host;
    if (bootstrap_port != 0) params["bootstrap_port"] = bootstrap_port;
    if (!bootstrap_addr.empty()) params["bootstrap_addr"] = bootstrap_addr;
    if (!engine_id.empty()) params["engine_id"] = engine_id;
    obj["disagg_meta"]["params"] = params;
    if (!worker_id.empty()) obj["worker_id"] = worker_id;
    record = infera::discovery::WorkerRecordFromJson(obj);
  }
  if (!record.ok()) {
    std::fprintf(stderr, "infera-register: %s\n", Message(record.status()).c_str());
    return 2;
  }

  // Block the shutdown signals before any thread starts, then wait for one here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (kv_relay != "none" && kv_relay != "nats") {
    std::fprintf(stderr, "infera-register: --kv-relay must be none or nats\n");
    return 2;
  }
  if (request_transport != "http" && request_transport != "nats") {
    std::fprintf(stderr, "infera-register: --request-transport must be http or nats\n");
    return 2;
  }
  if (relay_only && kv_relay == "none" && request_transport == "http") {
    std::fprintf(stderr,
                 "infera-register: --relay-only needs --kv-relay nats or --request-transport "
                 "nats\n");
    return 2;
  }
  if (record->request_transport == "nats" && request_transport != "nats") {
    std::fprintf(stderr,
                 "infera-register: the record says request_transport nats: serve it with "
                 "--request-transport nats\n");
    return 2;
  }
  // --request-transport nats: the worker's NATS subject, served on a loop of our own.
  std::unique_ptr<infera::http::IoPool> pool;
  std::unique_ptr<infera::transport::NatsRequestServer> requests;
  const int64_t drain_ms = static_cast<int64_t>(drain_s * 1000);
  if (request_transport == "nats") {
    record->request_transport = "nats";
    auto timeouts = nats_request_flags.Resolve();
    auto engine = infera::http::ParseHttpUrl(record->url);
    for (const absl::Status& s : {timeouts.status(), engine.status()}) {
      if (!s.ok()) {
        std::fprintf(stderr, "infera-register: %s\n", Message(s).c_str());
        return 2;
      }
    }
    infera::transport::NatsRequestServerOptions server_options;
    server_options.worker_id = record->worker_id;
    server_options.engine = *engine;
    server_options.nats_url = relay_options.nats.url;
    server_options.idle_timeout_ms = timeouts->idle_timeout_ms;
    server_options.max_duration_ms = timeouts->max_duration_ms;
    if (absl::Status s = infera::transport::ValidateNatsRequestServerOptions(server_options);
        !s.ok()) {
      std::fprintf(stderr, "infera-register: %s\n", Message(s).c_str());
      return 2;
    }
    pool = std::make_unique<infera::http::IoPool>(1);
    pool->Start();
    requests = std::make_unique<infera::transport::NatsRequestServer>(server_options, *pool);
    if (absl::Status s = requests->Start(); !s.ok()) {
      std::fprintf(stderr, "infera-register: %s\n", Message(s).c_str());
      return 2;
    }
  }
  // After deregistering (no new work arrives): drain the NATS requests in flight.
  auto stop_serving = [&] {
    if (requests) requests->Stop(drain_ms);
    if (pool) pool->Stop();
  };
  std::unique_ptr<infera::events::NatsRelay> relay;
  if (kv_relay == "nats") {
    if (record->kv_events_endpoint.empty()) {
      std::fprintf(stderr, "infera-register: --kv-relay nats needs --kv-events-endpoint\n");
      return 2;
    }
    std::vector<infera::events::RelayTarget> targets;
    for (uint32_t r = 0; r < record->dp_size; ++r) {
      const uint32_t rank = record->dp_rank + r;
      targets.push_back(
          {.key = {record->worker_id, rank},
           .events_endpoint = infera::events::OffsetEndpointPort(record->kv_events_endpoint, rank),
           .replay_endpoint = infera::events::OffsetEndpointPort(record->kv_replay_endpoint, rank),
           .topic = kv_events_topic});
    }
    relay = std::make_unique<infera::events::NatsRelay>(std::move(targets), relay_options);
    if (absl::Status s = relay->Start(); !s.ok()) {
      std::fprintf(stderr, "infera-register: %s\n", Message(s).c_str());
      return 2;
    }
    spdlog::info("infera-register: relaying KV events of {} ({} ranks) to {}", record->worker_id,
                 record->dp_size, relay_options.nats.url);
  }
  if (k8s && !relay_only) {
    if (k8s_options.pod_name.empty()) {
      if (const char* v = std::getenv("POD_NAME")) k8s_options.pod_name = v;
    }
    if (k8s_options.namespace_name.empty()) {
      const char* v = std::getenv("POD_NAMESPACE");
      k8s_options.namespace_name =
          v != nullptr && *v != '\0'
              ? std::string(v)
              : infera::discovery::InClusterNamespace(k8s_config.k8s_service_account_dir);
    }
    auto client = infera::discovery::KubeClientOptionsFrom(k8s_config);
    if (!client.ok()) {
      std::fprintf(stderr, "infera-register: %s\n", Message(client.status()).c_str());
      return 2;
    }
    k8s_options.client = *std::move(client);
    auto created = infera::discovery::KubeRegistrar::Create(*record, k8s_options);
    if (!created.ok()) {
      std::fprintf(stderr, "infera-register: %s\n", Message(created.status()).c_str());
      return 2;
    }
    std::unique_ptr<infera::discovery::KubeRegistrar> kube = *std::move(created);
    spdlog::info("infera-register: keeping {} in pod {}/{} annotation (refresh {} s)",
                 record->worker_id, k8s_options.namespace_name, k8s_options.pod_name,
                 k8s_options.refresh_s);
    kube->Start();
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    if (relay) relay->Stop();
    spdlog::info("infera-register: signal {}, removing the annotation", signal_number);
    if (absl::Status s = kube->Stop(); !s.ok()) spdlog::warn("infera-register: {}", Message(s));
    stop_serving();
    return 0;
  }
  std::unique_ptr<EtcdRegistrar> registrar;
  if (!relay_only) {
    auto created = EtcdRegistrar::Create(*record, options);
    if (!created.ok()) {
      std::fprintf(stderr, "infera-register: %s\n", Message(created.status()).c_str());
      return 2;
    }
    registrar = *std::move(created);
    spdlog::info("infera-register: keeping {} registered at {} (TTL {} s, keepalive {} s)",
                 registrar->key(), options.client.endpoints, options.lease_ttl_s,
                 options.keepalive_interval_s);
    registrar->Start();
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  if (relay) relay->Stop();
  if (registrar) {
    spdlog::info("infera-register: signal {}, revoking", signal_number);
    absl::Status revoked = registrar->Stop();
    if (!revoked.ok()) spdlog::warn("infera-register: {}", Message(revoked));
  }
  stop_serving();
  return 0;
}
