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
#include <string>

#include "register_flags.h"
#include "sidecar.h"

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "infera-register: %s\n", std::string(s.message()).c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using infera::registrar::RegisterFlags;
  CLI::App app{"infera-register: registers a worker record in etcd under a lease"};
  RegisterFlags flags;
  infera::registrar::AddRegisterFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help exits 0; every flag error exits 2
  }
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  infera::registrar::ApplyRegisterEnv(flags, [](const char* name) { return std::getenv(name); });
  auto record = infera::registrar::BuildRecord(flags);
  if (!record.ok()) return Fail(record.status());

  // Block the shutdown signals before any thread starts, then wait for one here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (absl::Status s = infera::registrar::CheckRegisterFlags(flags, *record); !s.ok()) {
    return Fail(s);
  }
  infera::registrar::Sidecar sidecar(flags, *std::move(record));
  if (absl::Status s = sidecar.Start(); !s.ok()) return Fail(s);
  if (absl::Status s = sidecar.RegisterAndWait(signals); !s.ok()) return Fail(s);
  return 0;
}
