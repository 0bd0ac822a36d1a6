// EngineProcess: infera-mock-engine's run (main.cc, doc/sim.md): the simulated engine,
// its HTTP listener (and a prefill worker's bootstrap listener), the NATS request
// server (--request-transport nats) and the etcd registration (--etcd-endpoint).
//
//   EngineProcess process(flags);   // flags resolved (mock_flags.h)
//   if (absl::Status s = process.Start(); !s.ok()) { /* exit 2 */ }
//   /* wait for SIGTERM */ process.Stop();
//
// Start prints "infera-mock-engine listening port=P [bootstrap=B] events=... replay=..."
// on stdout once the listeners are bound (tests read the ports from it).
//
// Thread-safety: Start and Stop from one thread.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "discovery/etcd_registrar.h"
#include "engine_runner.h"
#include "http/io_pool.h"
#include "http/server.h"
#include "mock_flags.h"
#include "mock_server.h"
#include "pd_role.h"
#include "prompt_tokenizer.h"
#include "transport/nats_request_server.h"

namespace infera::mock {

class EngineProcess {
 public:
  // REQUIRES: ResolveMockFlags(flags).ok(); `flags` outlives the process.
  explicit EngineProcess(MockFlags& flags);

  // Errors: the message the process exits with (status 2) after "infera-mock-engine: ";
  // a failure after the HTTP listener started shuts it down first.
  absl::Status Start();

  // Deregisters, then stops the NATS request server, the listeners and the loops.
  void Stop();

 private:
  absl::Status Listen();
  absl::Status ListenBootstrap();
  void PrintListening() const;
  absl::Status StartNatsRequests();
  absl::Status Register();
  void StopServer();

  MockFlags& flags_;
  std::unique_ptr<PromptTokenizer> tokenizer_;
  std::unique_ptr<EngineRunner> runner_;
  std::unique_ptr<MockServer> mock_;
  std::unique_ptr<http::IoPool> pool_;
  std::unique_ptr<http::Server> server_;
  std::unique_ptr<PdRole> pd_;
  std::unique_ptr<http::Server> bootstrap_;
  std::unique_ptr<transport::NatsRequestServer> nats_requests_;
  std::unique_ptr<discovery::EtcdRegistrar> registrar_;
};

}  // namespace infera::mock
