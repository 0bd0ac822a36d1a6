#include "router/encode/render_parity_prober.h"

#include <chrono>
#include <exception>

#include "router/dispatch/leg_request.h"
#include "router/metrics/router_metrics.h"
#include "router/plan/worker_set.h"
#include "spdlog/spdlog.h"

namespace infera::router {

namespace asio = http::asio;

RenderParityProber::RenderParityProber(RenderParityOptions options, http::IoPool& pool,
                                       Upstream& upstream, const core::Clock& clock,
                                       const WorkerSet& workers, RouterMetrics& metrics)
    : options_(options),
      pool_(pool),
      upstream_(upstream),
      clock_(clock),
      workers_(workers),
      metrics_(metrics) {}

void RenderParityProber::Start(std::optional<ProbeRendering> probe) {
  if (!probe) {
    spdlog::info(
        "render parity: not checked (the router renders no chats without "
        "--router-tokenizer-path and a chat template); every worker counts as exact");
    return;
  }
  probe_ = std::move(*probe);
  started_.store(true, std::memory_order_release);
  // A named snapshot: `*workers_.Snapshot()` in the range would free the fleet
  // under the loop when discovery publishes a new one (ASan: use-after-free).
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  for (const auto& w : *fleet) Spawn(w);
  if (options_.interval_ns > 0) {
    asio::co_spawn(pool_.executor(0), Every(), asio::detached);
  }
}

void RenderParityProber::OnAdded(std::shared_ptr<const FleetWorker> worker) {
  if (started_.load(std::memory_order_acquire)) Spawn(std::move(worker));
}

void RenderParityProber::Spawn(std::shared_ptr<const FleetWorker> worker) {
  asio::co_spawn(pool_.executor(0), Probe(std::move(worker)), asio::detached);
}

http::Awaitable<void> RenderParityProber::Every() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_after(std::chrono::nanoseconds(options_.interval_ns));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
    for (const auto& w : *fleet) Spawn(w);
  }
}

http::Awaitable<void> RenderParityProber::Probe(std::shared_ptr<const FleetWorker> worker) {
  UpstreamRequest request;
  AddressWorker(request, *worker);
  request.method = "POST";
  request.path = "/tokenize";
  request.headers.Add("Content-Type", "application/json");
  request.body = ProbeRequestBody(ProbeShapeFor(worker->record.engine), worker->record.model_name,
                                  probe_.text);
  request.deadline_ns = clock_.NowNs() + options_.timeout_ns;
  ProbeOutcome outcome = ProbeOutcome::kError;
  std::string detail;
  try {
    auto sent = co_await upstream_.Send(std::move(request));
    if (!sent.ok()) {
      detail = sent.status().ToString();
    } else {
      const int status = (*sent)->status();
      absl::StatusOr<std::string> body = co_await (*sent)->ReadAll(kMaxAnswerBytes);
      if (body.ok()) {
        outcome = ClassifyProbeAnswer(status, *body, probe_.ids, &detail);
      } else {
        detail = body.status().ToString();
      }
    }
  } catch (const std::exception& e) {
    detail = e.what();
  }
  Apply(*worker, outcome, detail);
}

void RenderParityProber::Apply(const FleetWorker& worker, ProbeOutcome outcome,
                               const std::string& detail) {
  metrics_.CountRenderParityProbe(ProbeOutcomeName(outcome));
  if (worker.retired.load(std::memory_order_relaxed)) return;  // gone from discovery
  const RenderParity before = worker.render_parity.load(std::memory_order_relaxed);
  const RenderParity after = NextParity(before, outcome);
  worker.render_parity.store(after, std::memory_order_relaxed);
  worker.renders_differently.store(!CountsAsExact(after), std::memory_order_relaxed);
  const std::string& id = worker.record.worker_id;
  if (outcome == ProbeOutcome::kError) {
    spdlog::warn("render parity: worker {}: probe failed ({}); verdict stays {}", id, detail,
                 RenderParityName(after));
  } else if (after == RenderParity::kDiverged && before != after) {
    spdlog::warn(
        "render parity: worker {} renders differently ({}): its token counts are estimates "
        "and its KV overlap is not trusted until a probe matches",
        id, detail);
  } else if (before != after) {
    spdlog::info("render parity: worker {}: {} ({})", id, RenderParityName(after), detail);
  }
}

}  // namespace infera::router
