#include "router/plan/readiness.h"

#include <chrono>

#include "router/plan/worker_set.h"
#include "spdlog/spdlog.h"

namespace infera::router {

namespace asio = http::asio;

Readiness::State Readiness::Check() const {
  State s;
  // The snapshot first: a worker in it has registered its replay with the source
  // already (WorkerSet adds targets before it publishes), so a worker whose views are
  // still being rebuilt is never mistaken for one that has none to rebuild.
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  const int64_t now_ns = clock_.NowNs();
  s.workers = fleet->size();
  for (const auto& w : *fleet) s.routable_workers += w->Routable(now_ns) ? 1 : 0;
  s.replay_done = replay_done_.load(std::memory_order_acquire);
  if (!s.replay_done && s.routable_workers > 0 && !events_.Replaying()) {
    if (!replay_done_.exchange(true)) {
      spdlog::info("router ready: start-up replay done, {} of {} workers routable",
                   s.routable_workers, s.workers);
      RunHookOnce();
    }
    s.replay_done = true;
  }
  s.ready = s.replay_done && s.routable_workers > 0;
  return s;
}

void Readiness::Start(http::IoPool& pool) {
  if (replay_done_.load()) {
    RunHookOnce();
    return;
  }
  asio::co_spawn(pool.executor(0), Tick(), asio::detached);
}

void Readiness::RunHookOnce() const {
  // Start (latched from the start) and Check (the false -> true exchange) may both
  // see the latch hold; the hook runs for the first of them only.
  if (on_latched_ && !hook_ran_.exchange(true)) on_latched_();
}

http::Awaitable<void> Readiness::Tick() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!Check().replay_done) {
    timer.expires_after(std::chrono::milliseconds(kTickMs));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
  }
}

}  // namespace infera::router
