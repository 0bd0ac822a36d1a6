// FleetDoctor: runs the doctor's checks against live workers (doc/operations.md
// "Doctor"; the verdicts, causes and fixes are in checks.h).
//
//   DoctorOptions options;
//   options.tokenizer_path = "/models/qwen3";     // --router-tokenizer-path
//   FleetDoctor doctor(options);
//   std::vector<CheckResult> results = doctor.CheckRouter();
//   for (const WorkerRecord& r : records) Append(results, doctor.CheckWorker(r));
//   doctor.SaveFingerprints();                     // with --fingerprints FILE
//
// Per worker, in order (a failure to reach it skips the rest):
//   reachable       GET <url>/v1/models answers
//   model           the record's model_name is among the models it serves
//   kv-events       a SUB connects to the record's kv_events_endpoint (every dp rank), and
//                   (probe on) a BlockStored for the probe prompt arrives on it, on a topic
//                   the router's --kv-events-topic accepts
//   block-size      tokens per block in those events == the record's kv_block_size
//   hash-stability  (probe on, --fingerprints FILE) the engine hash of the probe's fixed
//                   blocks against the one recorded by an earlier run
//   render-parity   (render_parity on) the engine's /tokenize of the router's probe chat
//                   equals the router's ids (router/render_parity.h)
// With probe off (the router's start-up default) no generation request is sent: the
// kv-events check waits passive_wait_ms for traffic's first BlockStored instead.
//
// Thread-safety: one thread at a time; owns an HTTP loop thread and a ZMQ context.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "discovery/discovery_factory.h"
#include "discovery/worker_record.h"
#include "doctor/checks.h"

namespace infera::doctor {

struct DoctorOptions {
  std::string tokenizer_path;   // --router-tokenizer-path ("" = none)
  std::string kv_events_topic;  // the router's --kv-events-topic ("" = all)
  std::string kv_event_transport = "zmq";
  std::string fingerprints_path;   // --fingerprints ("" = no hash-stability check)
  bool probe = true;               // send the probe completion (else passive)
  bool render_parity = true;       // check /tokenize against the router's rendering
  int64_t timeout_ms = 5000;       // each HTTP exchange; the events of one probe
  int64_t passive_wait_ms = 2000;  // probe off: how long to wait for traffic's events
  // Set (by another thread): the event waits end at once (the router is stopping).
  const std::atomic<bool>* stop = nullptr;
};

class FleetDoctor {
 public:
  explicit FleetDoctor(DoctorOptions options);
  ~FleetDoctor();
  FleetDoctor(const FleetDoctor&) = delete;
  FleetDoctor& operator=(const FleetDoctor&) = delete;

  // The router's own configuration: its tokenizer and chat template (loaded here,
  // with the router's encoder, when render_parity is on).
  std::vector<CheckResult> CheckRouter();
  std::vector<CheckResult> CheckWorker(const discovery::WorkerRecord& record);
  // Writes the fingerprints seen by CheckWorker into fingerprints_path (no-op without).
  absl::Status SaveFingerprints();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The workers a router with these discovery flags would see: static flags at once;
// etcd: its range snapshot (waits until no record arrived for quiet_ms, at most
// wait_ms). Errors are the router's own (bad --worker, unreadable --workers-file).
absl::StatusOr<std::vector<discovery::WorkerRecord>> CollectWorkers(
    const discovery::DiscoveryConfig& config, int64_t wait_ms, int64_t quiet_ms = 500);

}  // namespace infera::doctor
