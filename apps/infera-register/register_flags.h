// infera-register's flags (main.cc): the worker record's fields, the sidecar's
// registration, relay and request-serving settings, and their checks.
//
//   RegisterFlags flags;
//   AddRegisterFlags(app, flags);  app.parse(argc, argv);
//   ApplyRegisterEnv(flags, [](const char* name) { return std::getenv(name); });
//   absl::StatusOr<WorkerRecord> record = BuildRecord(flags);  // then CheckRegisterFlags
//
// Thread-safety: one thread; REQUIRES: `flags` is not moved after AddRegisterFlags.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "discovery/discovery_factory.h"
#include "discovery/etcd_registrar.h"
#include "discovery/kube_registrar.h"
#include "discovery/worker_record.h"
#include "engine_events/nats_relay.h"
#include "transport/nats_request_flags.h"

namespace infera::registrar {

struct RegisterFlags {
  // The record: --record-json, or the field flags.
  std::string record_json, worker_id, url, model_name, engine = "vllm", disagg_mode = "mixed";
  std::string disagg_protocol, kv_events_endpoint, kv_replay_endpoint;
  std::string bootstrap_host, bootstrap_addr, engine_id;
  uint32_t bootstrap_port = 0;
  uint32_t kv_block_size = 16, dp_rank = 0, dp_size = 1, num_gpu_blocks = 0;
  // The sidecar.
  discovery::EtcdRegistrarOptions etcd;
  std::string log_level = "info";
  std::string kv_relay = "none", kv_events_topic;
  events::NatsRelayOptions relay_options;
  bool relay_only = false;
  std::string request_transport = "http";
  double drain_s = 30;
  transport::NatsRequestFlags nats_request_flags;
  bool k8s = false;
  discovery::DiscoveryConfig k8s_config;  // the client flags the router takes too
  discovery::KubeRegistrarOptions k8s_options;
  CLI::Option* nats_flag = nullptr;
};

void AddRegisterFlags(CLI::App& app, RegisterFlags& flags);

// The environment's lookup: the variable's value, nullptr when unset (std::getenv).
using EnvLookup = std::function<const char*(const char*)>;

// The environment's fallbacks: NATS_SERVER without --nats-server; with --k8s (and not
// --relay-only) POD_NAME without --k8s-pod, POD_NAMESPACE without --k8s-namespace.
void ApplyRegisterEnv(RegisterFlags& flags, const EnvLookup& getenv);

// The worker record the flags describe. Errors: the message infera-register exits with.
absl::StatusOr<discovery::WorkerRecord> BuildRecord(const RegisterFlags& flags);

// The sidecar's settings against each other and the record (exit 2 with the message).
absl::Status CheckRegisterFlags(const RegisterFlags& flags, const discovery::WorkerRecord& record);

}  // namespace infera::registrar
