// infera-mock-engine's flags (main.cc, doc/sim.md) and what they resolve to: the
// runner's, the HTTP server's and the PD role's options.
//
//   MockFlags flags;
//   AddMockFlags(app, flags);  CLI11_PARSE(app, argc, argv);
//   absl::Status s = ResolveMockFlags(flags, random_word);  // exit 2 with its message
//
// Thread-safety: one thread; REQUIRES: `flags` is not moved after AddMockFlags.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine_runner.h"
#include "mock_server.h"
#include "pd_role.h"
#include "transport/nats_request_flags.h"

namespace infera::mock {

struct MockFlags {
  std::string host = "0.0.0.0";
  uint16_t port = 8000;
  std::string engine_kind = "vllm", role = "mixed", tokenizer_dir;
  RunnerOptions runner_options;
  MockServerOptions server_options;
  std::string etcd_endpoint, advertise_host = "127.0.0.1";
  int io_threads = 2;
  std::string pd_protocol;
  PdOptions pd_options;
  uint16_t bootstrap_port = 0;
  bool render_differently = false;
  std::vector<std::string> lora_modules;
  bool unstable_hash_seed = false;
  std::string request_transport = "http", nats_url = "nats://127.0.0.1:4222";
  transport::NatsRequestFlags nats_request_flags;
};

void AddMockFlags(CLI::App& app, MockFlags& flags);

// Checks the flags against each other and fills the options from them. `random_word`
// draws a random 32-bit word (--unstable-hash-seed). Errors: the message the process
// exits with (status 2), after "infera-mock-engine: ".
absl::Status ResolveMockFlags(MockFlags& flags, const std::function<uint32_t()>& random_word);

}  // namespace infera::mock
