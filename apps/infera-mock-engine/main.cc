// infera-mock-engine: a simulated vLLM/SGLang worker (doc/sim.md). Wiring only: the
// flags are in mock_flags.h, the run in engine_process.h.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <random>
#include <string>

#include "engine_process.h"
#include "mock_flags.h"

int main(int argc, char** argv) {
  CLI::App app{"infera-mock-engine: a simulated vLLM/SGLang worker"};
  infera::mock::MockFlags flags;
  infera::mock::AddMockFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  auto random_word = [] {
    std::random_device rd;
    return static_cast<uint32_t>(rd());
  };
  if (absl::Status s = infera::mock::ResolveMockFlags(flags, random_word); !s.ok()) {
    std::fprintf(stderr, "infera-mock-engine: %s\n", std::string(s.message()).c_str());
    return 2;
  }

  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  infera::mock::EngineProcess process(flags);
  if (absl::Status s = process.Start(); !s.ok()) {
    std::fprintf(stderr, "infera-mock-engine: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  process.Stop();
  return 0;
}
