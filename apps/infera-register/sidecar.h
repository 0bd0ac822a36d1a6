// Sidecar: what infera-register runs beside one worker (main.cc, doc/discovery.md):
// serving the worker's NATS request subject (--request-transport nats), relaying its
// KV events to JetStream (--kv-relay nats), and keeping its record registered in etcd
// or in its Pod's annotation (--k8s) until SIGTERM/SIGINT.
//
//   Sidecar sidecar(flags, record);
//   if (absl::Status s = sidecar.Start(); !s.ok()) { /* exit 2 */ }
//   absl::Status s = sidecar.RegisterAndWait(signals);  // deregisters, drains, stops
//
// Thread-safety: one thread (main's).
#pragma once

#include <signal.h>

#include <memory>

#include "absl/status/status.h"
#include "discovery/worker_record.h"
#include "engine_events/nats_relay.h"
#include "http/io_pool.h"
#include "register_flags.h"
#include "transport/nats_request_server.h"

namespace infera::registrar {

class Sidecar {
 public:
  // REQUIRES: CheckRegisterFlags(flags, record).ok(); `flags` outlives the sidecar.
  Sidecar(const RegisterFlags& flags, discovery::WorkerRecord record);

  // Starts the NATS request server and the KV relay the flags ask for. Errors: the
  // message infera-register exits with (status 2).
  absl::Status Start();

  // Registers the record (unless --relay-only), waits for one of `signals`, stops the
  // relay, deregisters, then drains the NATS requests in flight. Errors (before the
  // wait): the message infera-register exits with (status 2).
  absl::Status RegisterAndWait(const sigset_t& signals);

 private:
  absl::Status StartRequests();
  absl::Status StartRelay();
  absl::Status RunKube(const sigset_t& signals);
  absl::Status RunEtcd(const sigset_t& signals);
  // After deregistering (no new work arrives): drain the NATS requests in flight.
  void StopServing();

  const RegisterFlags& flags_;
  discovery::WorkerRecord record_;
  std::unique_ptr<http::IoPool> pool_;
  std::unique_ptr<transport::NatsRequestServer> requests_;
  std::unique_ptr<events::NatsRelay> relay_;
};

}  // namespace infera::registrar
