#include "router/dispatch/admission_dispatcher.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "router/request/admission_headers.h"
#include "router/request/api_errors.h"

namespace infera::router {

namespace asio = http::asio;

struct AdmissionDispatcher::Waiter {
  explicit Waiter(asio::any_io_executor ex) : timer(ex) {}
  asio::steady_timer timer;             // used on the request's loop only
  Verdict verdict = Verdict::kWaiting;  // guarded by the dispatcher's mu_
};

namespace {

std::optional<std::string_view> HeaderOf(const http::Headers& headers, std::string_view name) {
  if (!headers.Has(name)) return std::nullopt;
  return headers.Get(name);
}

// Calls ctx.on_planned when the bound request leaves without a plan (no candidate, an
// exception): its pool's next request may bind.
struct PlannedOnExit {
  RequestContext& ctx;
  ~PlannedOnExit() {
    if (ctx.on_planned) ctx.on_planned();
    ctx.on_planned = nullptr;
  }
};

}  // namespace

AdmissionDispatcher::AdmissionDispatcher(AdmissionOptions options, const WorkerSet& workers,
                                         PickPlanner& planner, Dispatcher& inner,
                                         const core::Clock& clock)
    : options_(std::move(options)),
      workers_(workers),
      planner_(planner),
      inner_(inner),
      clock_(clock),
      gate_(options_.queue) {}

http::Awaitable<void> AdmissionDispatcher::Dispatch(RequestContext& ctx,
                                                    const http::Headers& headers,
                                                    http::ResponseWriter& w) {
  absl::StatusOr<int> priority = ParseAdmissionPriority(HeaderOf(headers, kPriorityHeader));
  if (!priority.ok()) {
    ctx.End(Outcome::kClientError, 400);
    co_await SendError(w, ctx.kind, 400, std::string(priority.status().message()), ctx.request_id);
    co_return;
  }
  const std::string tenant =
      AdmissionTenant(HeaderOf(headers, kTenantHeader), HeaderOf(headers, "Authorization"));
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  const std::string key = PickPlanner::AdmissionKey(ctx.api.model, *fleet);
  if (!options_.pd_pools && key.ends_with("|prefill")) co_return co_await inner_.Dispatch(ctx, w);
  const core::Selector::Hold hold =
      planner_.AdviseHold(ctx, *fleet, options_.threshold_blocks, options_.join_blocks,
                          gate_.Depth(key) > 0);
  if (hold == core::Selector::Hold::kBypass) {  // half cached: waiting cannot make it cheaper
    metrics_.CountAdmitted(/*queued=*/false);
    co_return co_await inner_.Dispatch(ctx, w);
  }
  auto waiter = std::make_shared<Waiter>(co_await asio::this_coro::executor);
  const int64_t offered_ns = clock_.NowNs();
  uint64_t id = 0;
  core::Admission admission;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    admission = gate_.Offer(key, id, tenant, *priority, offered_ns,
                            hold == core::Selector::Hold::kWait);
    if (admission == core::Admission::kQueued) {
      waiters_.emplace(id, waiter);
      models_[key] = ctx.api.model;
    }
  }
  if (admission == core::Admission::kRejected) {
    metrics_.CountRejected(/*timeout=*/false);
    co_return co_await Reject(ctx, w, key, /*timeout=*/false);
  }
  metrics_.CountAdmitted(admission == core::Admission::kQueued);
  if (admission == core::Admission::kBindNow) co_return co_await inner_.Dispatch(ctx, w);

  const Verdict verdict = co_await Wait(ctx, *waiter, id, key);
  if (verdict == Verdict::kExpired) {
    metrics_.CountRejected(/*timeout=*/true);
    co_return co_await Reject(ctx, w, key, /*timeout=*/true);
  }
  if (verdict == Verdict::kWaiting) {  // it left the queue: the client, or its timeout
    if (ctx.cancel->cancelled() || w.client_gone()) {
      metrics_.CountCancelled();
      ctx.End(Outcome::kCancelled, 499);
      co_return;
    }
    ctx.End(Outcome::kTimeout, 504);
    co_return co_await SendError(
        w, ctx.kind, 504, "the request timed out in the router's admission queue", ctx.request_id);
  }
  metrics_.ObserveWait(static_cast<double>(clock_.NowNs() - offered_ns) * 1e-9);
  auto planned = std::make_shared<std::atomic<bool>>(false);
  ctx.on_planned = [this, key = key, planned] {
    if (!planned->exchange(true)) Planned(key);
  };
  PlannedOnExit on_exit{ctx};
  if (ctx.cancel->cancelled() || w.client_gone()) {  // bound as it left
    ctx.End(Outcome::kCancelled, 499);
    co_return;
  }
  co_await inner_.Dispatch(ctx, w);
}

http::Awaitable<AdmissionDispatcher::Verdict> AdmissionDispatcher::Wait(RequestContext& ctx,
                                                                        Waiter& waiter, uint64_t id,
                                                                        const std::string& key) {
  // The one-shot signal: Wake posts the timer's cancel to this loop, which runs only
  // once this coroutine waits on it.
  waiter.timer.expires_after(std::chrono::nanoseconds(ctx.deadline_ns - clock_.NowNs()));
  if (!ctx.cancel->cancelled()) {
    ctx.cancel->Bind([&waiter] { waiter.timer.cancel(); });
    boost::system::error_code ec;
    co_await waiter.timer.async_wait(http::NoThrow(ec));
    ctx.cancel->Unbind();
  }
  absl::MutexLock lock(&mu_);
  if (waiter.verdict == Verdict::kWaiting) {
    waiters_.erase(id);
    gate_.Cancel(key, id);
  }
  co_return waiter.verdict;
}

http::Awaitable<void> AdmissionDispatcher::Reject(RequestContext& ctx, http::ResponseWriter& w,
                                                  const std::string& key, bool timeout) {
  const int64_t retry_s = gate_.RetryAfterSeconds(key, clock_.NowNs());
  std::string message =
      timeout ? "the request waited --queue-max-wait-s in the router's queue"
              : "router queue full (" + std::to_string(gate_.Depth(key)) + " waiting)";
  ctx.End(Outcome::kClientError, 429);
  http::Headers h;
  h.Add("Content-Type", "application/json");
  h.Add("Retry-After", std::to_string(retry_s));
  if (!ctx.request_id.empty()) h.Add("X-Infera-Request-Id", ctx.request_id);
  co_await w.Send(429, std::move(h),
                  ErrorBodyFor(ctx.kind, 429, message, timeout ? "queue_timeout" : "queue_full"));
}

void AdmissionDispatcher::Wake(uint64_t id, Verdict verdict) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  std::shared_ptr<Waiter> waiter = std::move(it->second);
  waiters_.erase(it);
  waiter->verdict = verdict;
  asio::post(waiter->timer.get_executor(), [waiter] { waiter->timer.cancel(); });
}

void AdmissionDispatcher::Drain(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto model = models_.find(key);
  if (model == models_.end() || binding_.contains(key)) return;
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  bool asked = false;  // serial binding: at most one release per drain
  const std::vector<uint64_t> released = gate_.Drain(key, clock_.NowNs(), [&] {
    if (std::exchange(asked, true)) return true;
    return planner_.AdmissionPool(model->second, *fleet).min_load >=
           core::Selector::ReleaseBelow(options_.threshold_blocks, options_.join_blocks);
  });
  for (uint64_t id : released) {
    if (waiters_.contains(id)) ++binding_[key];
    Wake(id, Verdict::kBind);
  }
}

void AdmissionDispatcher::Planned(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    auto it = binding_.find(key);
    if (it != binding_.end() && --it->second <= 0) binding_.erase(it);
  }
  Drain(key);
}

void AdmissionDispatcher::DrainAll() {
  for (const std::string& key : gate_.KeysWaiting()) Drain(key);
}

void AdmissionDispatcher::Start(http::IoPool& pool) {
  asio::co_spawn(pool.executor(0), TimerLoop(), asio::detached);
}

http::Awaitable<void> AdmissionDispatcher::TimerLoop() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_after(std::chrono::milliseconds(10));
    boost::system::error_code ec;
    co_await timer.async_wait(http::NoThrow(ec));
    if (ec) co_return;  // the router stops
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [key, id] : gate_.Expire(clock_.NowNs())) Wake(id, Verdict::kExpired);
    }
    DrainAll();
  }
}

void AdmissionDispatcher::RenderMetrics(std::string& out) const {
  metrics_.Render(out, gate_.Depths());
}

}  // namespace infera::router
