// infera-router: flags -> RouterOptions, discovery -> Router callbacks, signals. The
// flags, their checks and --config live in src/router/config; this file only wires.
// `infera-router render ...` renders chat templates (src/template/render_command.h);
// `infera-router doctor ...` checks a fleet (src/doctor/doctor_command.h).
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstring>
#include <memory>

#include "allocator_options.h"
#include "discovery/discovery_factory.h"
#include "doctor/doctor_command.h"
#include "doctor/startup_doctor.h"
#include "router/config/router_flags.h"
#include "router/config/validate.h"
#include "router/router.h"
#include "spdlog/spdlog.h"
#include "template/render_command.h"

namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "render") == 0) {
    return infera::chat::RunRenderCommand(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "doctor") == 0) {
    return infera::doctor::RunDoctorCommand(argc, argv);
  }
  namespace config = infera::router::config;
  config::RouterFlags flags;
  CLI::App app{config::kRouterDescription};
  config::AddRouterFlags(app, flags);
  if (auto exit_code = config::ParseRouterFlags(app, flags, argc, argv)) return *exit_code;
  if (absl::Status s = config::ValidateRouterFlags(flags, config::ConfigSources::Process());
      !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }

  auto created = infera::discovery::CreateDiscovery(flags.discovery);
  if (!created.ok()) {
    spdlog::error("{}", created.status().ToString());
    return 2;
  }
  std::unique_ptr<infera::discovery::Discovery> discovery = *std::move(created);

  // Block SIGINT/SIGTERM in every thread; the main thread waits for them.
  sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  flags.options.on_ready = infera::app::EndStartupAllocatorOptions;
  infera::router::Router router(flags.options);
  if (absl::Status s = router.Start(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  if (absl::Status s = discovery->Start(router.Callbacks()); !s.ok()) {
    spdlog::error("discovery: {}", s.ToString());
    return 1;
  }
  spdlog::info("infera-router listening on {}:{} policy={} discovery={}", flags.host, router.port(),
               flags.policy, flags.discovery.backend);
  auto startup_doctor = infera::doctor::StartupDoctor::Start(
      flags.startup_doctor, flags.discovery,
      {flags.options.tokenizer_path, flags.options.kv_events_topic, flags.kv_transport});
  if (!startup_doctor.ok()) spdlog::warn("doctor: {}", startup_doctor.status().ToString());
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: draining", sig);
  if (startup_doctor.ok()) startup_doctor->reset();
  router.Shutdown();
  discovery->Stop();
  spdlog::info("stopped");
  return 0;
}
