#include "doctor/doctor_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "discovery/discovery_flags.h"
#include "doctor/fleet_doctor.h"

namespace infera::doctor {

int RunDoctorCommand(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  if (args.size() > 1 && std::string(args[1]) == "doctor") args.erase(args.begin() + 1);

  CLI::App app{
      "Check a fleet for the causes of missing cache hits: worker reachable, model served, KV "
      "events arriving, block size, engine hashes stable across restarts, render parity",
      "infera-router doctor"};
  app.allow_extras();
  discovery::DiscoveryConfig fleet;
  fleet.backend = "static";
  DoctorOptions options;
  int64_t discovery_wait_ms = 5000;
  discovery::AddDiscoveryFlags(app, fleet);
  app.add_option("--router-tokenizer-path", options.tokenizer_path,
                 "The router's tokenizer directory (render parity is checked against it)");
  app.add_option("--kv-events-topic", options.kv_events_topic,
                 "The router's ZMQ topic filter (events on other topics are reported)");
  app.add_option("--kv-event-transport", options.kv_event_transport,
                 "zmq | nats | none (event checks need zmq)")
      ->capture_default_str();
  app.add_option("--fingerprints", options.fingerprints_path,
                 "File of the engines' block-hash fingerprints: compared with and updated by "
                 "each run; run before and after an engine restart to check hash stability");
  app.add_option("--timeout-ms", options.timeout_ms,
                 "Deadline of each HTTP exchange and of a probe's KV events")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{600000}));
  app.add_option("--discovery-wait-ms", discovery_wait_ms,
                 "etcd: how long to wait for the worker records")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!app.remaining().empty()) {
    std::string ignored;
    for (const std::string& a : app.remaining()) ignored += " " + a;
    std::fprintf(stderr, "doctor: ignoring the router flags it does not use:%s\n", ignored.c_str());
  }
  absl::StatusOr<std::vector<discovery::WorkerRecord>> workers =
      CollectWorkers(fleet, discovery_wait_ms);
  if (!workers.ok()) {
    std::fprintf(stderr, "doctor: %s\n", workers.status().ToString().c_str());
    return 2;
  }
  if (workers->empty()) {
    std::fprintf(stderr, "doctor: no worker (give --worker, --workers-file or etcd discovery)\n");
    return 2;
  }
  FleetDoctor doctor(options);
  std::vector<CheckResult> results = doctor.CheckRouter();
  for (const discovery::WorkerRecord& r : *workers) {
    std::vector<CheckResult> more = doctor.CheckWorker(r);
    results.insert(results.end(), more.begin(), more.end());
  }
  std::fputs(FormatReport(results).c_str(), stdout);
  std::fflush(stdout);
  if (absl::Status s = doctor.SaveFingerprints(); !s.ok()) {
    std::fprintf(stderr, "doctor: %s\n", s.ToString().c_str());
    return 1;
  }
  return AnyFailed(results) ? 1 : 0;
}

}  // namespace infera::doctor
