#include "doctor/startup_doctor.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "doctor/fleet_doctor.h"
#include "spdlog/spdlog.h"

namespace infera::doctor {
namespace {

void Log(const CheckResult& r) {
  const auto level = r.verdict == Verdict::kFail   ? spdlog::level::err
                     : r.verdict == Verdict::kWarn ? spdlog::level::warn
                                                   : spdlog::level::info;
  std::string line = "doctor worker=" + (r.worker_id.empty() ? "router" : r.worker_id) +
                     " check=" + r.check + " verdict=" + VerdictName(r.verdict) + " detail=\"" +
                     r.detail + "\"";
  if (!r.cause.empty()) line += " cause=\"" + r.cause + "\"";
  if (!r.fix.empty()) line += " fix=\"" + r.fix + "\"";
  spdlog::log(level, "{}", line);
}

}  // namespace

void AddStartupDoctorFlags(CLI::App& app, StartupDoctorOptions& options) {
  app.add_option("--startup-doctor", options.mode,
                 "Check each worker discovered (at start and later) for the causes of missing "
                 "cache hits and log them (`infera-router doctor` runs the same checks): off | "
                 "passive (no request beyond GET /v1/models) | active (a 513-token probe "
                 "completion per worker: KV events, block size, hash stability)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "passive", "active"}));
  app.add_option("--doctor-fingerprints", options.fingerprints_path,
                 "--startup-doctor active: file of the engines' block-hash fingerprints, "
                 "compared and updated at each check (hash stability across engine restarts)");
}

struct StartupDoctor::Impl {
  DoctorOptions options;
  std::unique_ptr<discovery::Discovery> discovery;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<discovery::WorkerRecord> queue;  // guarded by mu
  std::atomic<bool> stop{false};
  std::thread thread;

  void Run() {
    FleetDoctor doctor(options);
    for (const CheckResult& r : doctor.CheckRouter()) Log(r);
    while (true) {
      discovery::WorkerRecord record;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop.load() || !queue.empty(); });
        if (stop.load()) return;
        record = std::move(queue.front());
        queue.pop_front();
      }
      std::vector<CheckResult> results = doctor.CheckWorker(record);
      if (stop.load()) return;
      int failed = 0;
      for (const CheckResult& r : results) {
        Log(r);
        failed += r.verdict == Verdict::kFail ? 1 : 0;
      }
      spdlog::log(failed > 0 ? spdlog::level::err : spdlog::level::info,
                  "doctor worker={} checks={} failed={}{}", record.worker_id, results.size(),
                  failed, failed > 0 ? " (each failure above names its fix)" : "");
      if (absl::Status s = doctor.SaveFingerprints(); !s.ok()) {
        spdlog::warn("doctor: {}", s.ToString());
      }
    }
  }
};

absl::StatusOr<std::unique_ptr<StartupDoctor>> StartupDoctor::Start(
    const StartupDoctorOptions& options, const discovery::DiscoveryConfig& fleet,
    const RouterFacts& router) {
  if (options.mode == "off") return std::unique_ptr<StartupDoctor>();
  auto impl = std::make_unique<Impl>();
  impl->options.tokenizer_path = router.tokenizer_path;
  impl->options.kv_events_topic = router.kv_events_topic;
  impl->options.kv_event_transport = router.kv_event_transport;
  impl->options.fingerprints_path = options.mode == "active" ? options.fingerprints_path : "";
  impl->options.probe = options.mode == "active";
  impl->options.render_parity = false;
  impl->options.timeout_ms = 2000;
  impl->options.passive_wait_ms = 2000;
  impl->options.stop = &impl->stop;
  absl::StatusOr<std::unique_ptr<discovery::Discovery>> created = discovery::CreateDiscovery(fleet);
  if (!created.ok()) return created.status();
  impl->discovery = std::move(*created);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  discovery::DiscoveryCallbacks callbacks;
  callbacks.on_added = [raw](const discovery::WorkerRecord& r) {
    std::lock_guard<std::mutex> lock(raw->mu);
    raw->queue.push_back(r);
    raw->cv.notify_one();
  };
  callbacks.on_updated = callbacks.on_added;
  callbacks.on_removed = [](const std::string&) {};
  std::unique_ptr<StartupDoctor> doctor(new StartupDoctor(std::move(impl)));
  if (absl::Status s = raw->discovery->Start(std::move(callbacks)); !s.ok()) {
    doctor->Stop();
    return s;
  }
  return doctor;
}

StartupDoctor::StartupDoctor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StartupDoctor::~StartupDoctor() { Stop(); }

void StartupDoctor::Stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->discovery->Stop();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

}  // namespace infera::doctor
