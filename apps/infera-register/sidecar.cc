#include "sidecar.h"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>
#include <vector>

#include "discovery/etcd_registrar.h"
#include "discovery/kube_client.h"
#include "discovery/kube_registrar.h"
#include "event_wire/dp_endpoint.h"
#include "http/url.h"

namespace infera::registrar {
namespace {

std::string Message(const absl::Status& s) { return std::string(s.message()); }

int WaitForSignal(const sigset_t& signals) {
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

}  // namespace

Sidecar::Sidecar(const RegisterFlags& flags, discovery::WorkerRecord record)
    : flags_(flags), record_(std::move(record)) {}

absl::Status Sidecar::Start() {
  if (flags_.request_transport == "nats") {
    if (absl::Status s = StartRequests(); !s.ok()) return s;
  }
  if (flags_.kv_relay == "nats") return StartRelay();
  return absl::OkStatus();
}

// --request-transport nats: the worker's NATS subject, served on a loop of our own.
absl::Status Sidecar::StartRequests() {
  record_.request_transport = "nats";
  auto timeouts = flags_.nats_request_flags.Resolve();
  auto engine = http::ParseHttpUrl(record_.url);
  for (const absl::Status& s : {timeouts.status(), engine.status()}) {
    if (!s.ok()) return s;
  }
  transport::NatsRequestServerOptions server_options;
  server_options.worker_id = record_.worker_id;
  server_options.engine = *engine;
  server_options.nats_url = flags_.relay_options.nats.url;
  server_options.idle_timeout_ms = timeouts->idle_timeout_ms;
  server_options.max_duration_ms = timeouts->max_duration_ms;
  if (absl::Status s = transport::ValidateNatsRequestServerOptions(server_options); !s.ok()) {
    return s;
  }
  pool_ = std::make_unique<http::IoPool>(1);
  pool_->Start();
  requests_ = std::make_unique<transport::NatsRequestServer>(server_options, *pool_);
  return requests_->Start();
}

absl::Status Sidecar::StartRelay() {
  if (record_.kv_events_endpoint.empty()) {
    return absl::InvalidArgumentError("--kv-relay nats needs --kv-events-endpoint");
  }
  std::vector<events::RelayTarget> targets;
  for (uint32_t r = 0; r < record_.dp_size; ++r) {
    const uint32_t rank = record_.dp_rank + r;
    targets.push_back(
        {.key = {record_.worker_id, rank},
         .events_endpoint = events::OffsetEndpointPort(record_.kv_events_endpoint, rank),
         .replay_endpoint = events::OffsetEndpointPort(record_.kv_replay_endpoint, rank),
         .topic = flags_.kv_events_topic});
  }
  relay_ = std::make_unique<events::NatsRelay>(std::move(targets), flags_.relay_options);
  if (absl::Status s = relay_->Start(); !s.ok()) return s;
  spdlog::info("infera-register: relaying KV events of {} ({} ranks) to {}", record_.worker_id,
               record_.dp_size, flags_.relay_options.nats.url);
  return absl::OkStatus();
}

absl::Status Sidecar::RegisterAndWait(const sigset_t& signals) {
  if (flags_.k8s && !flags_.relay_only) return RunKube(signals);
  return RunEtcd(signals);
}

absl::Status Sidecar::RunKube(const sigset_t& signals) {
  discovery::KubeRegistrarOptions options = flags_.k8s_options;
  if (options.namespace_name.empty()) {
    options.namespace_name =
        discovery::InClusterNamespace(flags_.k8s_config.k8s_service_account_dir);
  }
  auto client = discovery::KubeClientOptionsFrom(flags_.k8s_config);
  if (!client.ok()) return client.status();
  options.client = *std::move(client);
  auto created = discovery::KubeRegistrar::Create(record_, options);
  if (!created.ok()) return created.status();
  std::unique_ptr<discovery::KubeRegistrar> kube = *std::move(created);
  spdlog::info("infera-register: keeping {} in pod {}/{} annotation (refresh {} s)",
               record_.worker_id, options.namespace_name, options.pod_name, options.refresh_s);
  kube->Start();
  const int signal_number = WaitForSignal(signals);
  if (relay_) relay_->Stop();
  spdlog::info("infera-register: signal {}, removing the annotation", signal_number);
  if (absl::Status s = kube->Stop(); !s.ok()) spdlog::warn("infera-register: {}", Message(s));
  StopServing();
  return absl::OkStatus();
}

absl::Status Sidecar::RunEtcd(const sigset_t& signals) {
  std::unique_ptr<discovery::EtcdRegistrar> registrar;
  if (!flags_.relay_only) {
    auto created = discovery::EtcdRegistrar::Create(record_, flags_.etcd);
    if (!created.ok()) return created.status();
    registrar = *std::move(created);
    spdlog::info("infera-register: keeping {} registered at {} (TTL {} s, keepalive {} s)",
                 registrar->key(), flags_.etcd.client.endpoints, flags_.etcd.lease_ttl_s,
                 flags_.etcd.keepalive_interval_s);
    registrar->Start();
  }
  const int signal_number = WaitForSignal(signals);
  if (relay_) relay_->Stop();
  if (registrar) {
    spdlog::info("infera-register: signal {}, revoking", signal_number);
    absl::Status revoked = registrar->Stop();
    if (!revoked.ok()) spdlog::warn("infera-register: {}", Message(revoked));
  }
  StopServing();
  return absl::OkStatus();
}

void Sidecar::StopServing() {
  if (requests_) requests_->Stop(static_cast<int64_t>(flags_.drain_s * 1000));
  if (pool_) pool_->Stop();
}

}  // namespace infera::registrar
