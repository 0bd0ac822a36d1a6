#include "router/plan/health_checker.h"

#include <chrono>
#include <exception>

#include "http/client.h"
#include "router/metrics/router_metrics.h"
#include "router/plan/worker_set.h"
#include "spdlog/spdlog.h"

namespace infera::router {

namespace asio = http::asio;

HealthChecker::HealthChecker(HealthCheckOptions options, http::IoPool& pool, Upstream& upstream,
                             const core::Clock& clock, const WorkerSet& workers,
                             RouterMetrics& metrics)
    : options_(std::move(options)),
      pool_(pool),
      upstream_(upstream),
      clock_(clock),
      workers_(workers),
      metrics_(metrics) {}

void HealthChecker::Start() {
  if (!enabled()) {
    spdlog::info("health checks: off (--health-check-interval-ms 0); every worker counts healthy");
    return;
  }
  spdlog::info(
      "health checks: GET {} every {} ms, timeout {} ms; a worker leaves picks after {} failed "
      "probes in a row and returns after {} passed",
      options_.path, options_.interval_ms, options_.timeout_ms, options_.thresholds.unhealthy_after,
      options_.thresholds.healthy_after);
  {
    absl::MutexLock lock(&mu_);
    started_ = true;
  }
  // A named snapshot: `*workers_.Snapshot()` in the range would free the fleet under
  // the loop when discovery publishes a new one.
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  for (const auto& w : *fleet) Spawn(w);
}

void HealthChecker::OnAdded(std::shared_ptr<const FleetWorker> worker) {
  if (enabled()) Spawn(std::move(worker));
}

void HealthChecker::Spawn(std::shared_ptr<const FleetWorker> worker) {
  int loop = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!started_ || !looping_.insert(worker.get()).second) return;
    loop = static_cast<int>(next_loop_++ % static_cast<unsigned>(pool_.size()));
  }
  asio::co_spawn(pool_.executor(loop), Loop(std::move(worker)), asio::detached);
}

http::Awaitable<void> HealthChecker::Loop(std::shared_ptr<const FleetWorker> worker) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!worker->retired.load(std::memory_order_relaxed)) {
    const auto started = std::chrono::steady_clock::now();
    co_await Probe(*worker);
    timer.expires_at(started + std::chrono::milliseconds(options_.interval_ms));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;  // the router stops
  }
  absl::MutexLock lock(&mu_);
  looping_.erase(worker.get());
}

http::Awaitable<void> HealthChecker::Probe(const FleetWorker& worker) {
  UpstreamRequest request;
  request.endpoint = worker.endpoint;
  request.method = "GET";
  request.path = options_.path;
  request.deadline_ns = clock_.NowNs() + options_.timeout_ms * 1'000'000;
  request.cancel = std::make_shared<http::Cancellation>();
  const char* outcome = "ok";
  std::string error;
  try {
    auto sent = co_await upstream_.Send(std::move(request));
    absl::Status failed;
    if (!sent.ok()) {
      failed = sent.status();
    } else {
      // Read to the end: the keep-alive connection goes back to the pool.
      auto body = co_await (*sent)->ReadAll(kMaxAnswerBytes);
      if (!body.ok()) {
        failed = body.status();
      } else if ((*sent)->status() >= 500) {
        outcome = "status_5xx";
        error = "answered " + std::to_string((*sent)->status());
      }
    }
    if (!failed.ok()) {
      switch (failed.code()) {
        case absl::StatusCode::kDeadlineExceeded:
          outcome = "timeout";
          error = "no answer within " + std::to_string(options_.timeout_ms) + " ms";
          break;
        case absl::StatusCode::kResourceExhausted:
          outcome = "local";  // the router's own descriptors ran out: no verdict
          break;
        default:
          outcome = "unreachable";
          error = std::string(failed.message());
          break;
      }
    }
  } catch (const std::exception& e) {
    outcome = "unreachable";
    error = e.what();
  }
  metrics_.CountHealthCheck(outcome);
  if (std::string_view(outcome) == "local") co_return;
  if (worker.retired.load(std::memory_order_relaxed)) co_return;  // gone from discovery
  const bool passed = error.empty();
  const WorkerLiveness::Recorded r = worker.liveness.Record(passed, error, clock_.NowNs());
  const std::string& id = worker.record.worker_id;
  if (!passed) {
    spdlog::debug("health check: worker {}: probe failed ({}), {} in a row", id, error,
                  r.consecutive);
  }
  if (!r.flipped) co_return;
  metrics_.CountHealthTransition(r.healthy);
  if (r.healthy) {
    spdlog::info("health check: worker {} is healthy again after {} passed probes: back in picks",
                 id, r.consecutive);
  } else {
    spdlog::warn(
        "health check: worker {} is unhealthy after {} failed probes (last: {}): out of picks; "
        "{} requests waiting on it for a first byte fail over",
        id, r.consecutive, error, r.waiters);
  }
}

}  // namespace infera::router
