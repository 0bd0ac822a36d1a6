// StartupDoctor: the doctor's checks run by the router itself, logged (doc/operations.md
// "Doctor"). main.cc starts it after discovery; it checks every worker its own
// discovery reports (at start-up, and each worker that joins or changes later) on one
// background thread, never on the request path, and logs each result:
//
//   doctor worker=127.0.0.1:30000 check=block-size verdict=FAIL detail="..." cause="..." fix="..."
//
// --startup-doctor passive (default): no request is sent to a worker beyond GET
// /v1/models; KV events are checked on traffic's first BlockStored within 2 s, if any.
// active: the probe completion too (2 blocks' worth of ids per worker), and with
// --doctor-fingerprints FILE the hash-stability check across restarts. off: nothing.
// Render parity is left to the router's own prober (doc/render-parity.md), which logs
// its verdicts, so the tokenizer is not loaded twice.
//
// Thread-safety: Start/Stop from the owner thread.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "discovery/discovery_factory.h"

namespace infera::doctor {

struct StartupDoctorOptions {
  std::string mode = "passive";   // --startup-doctor off | passive | active
  std::string fingerprints_path;  // --doctor-fingerprints (active)
};

// --startup-doctor, --doctor-fingerprints.
void AddStartupDoctorFlags(CLI::App& app, StartupDoctorOptions& options);

// What the router was configured with that the checks compare against.
struct RouterFacts {
  std::string tokenizer_path;
  std::string kv_events_topic;
  std::string kv_event_transport = "zmq";
};

class StartupDoctor {
 public:
  // nullptr when the mode is off. Errors: the discovery configuration (already
  // validated by the router's own CreateDiscovery, so in practice none).
  static absl::StatusOr<std::unique_ptr<StartupDoctor>> Start(
      const StartupDoctorOptions& options, const discovery::DiscoveryConfig& fleet,
      const RouterFacts& router);
  ~StartupDoctor();  // Stop()
  // Ends a check in progress within about one HTTP deadline and joins the thread.
  void Stop();

  struct Impl;

 private:
  explicit StartupDoctor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace infera::doctor
