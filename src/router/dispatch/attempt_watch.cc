#include "router/dispatch/attempt_watch.h"

#include <chrono>

namespace infera::router {

namespace asio = http::asio;

struct AttemptWatch::State {
  explicit State(asio::any_io_executor ex) : executor(ex), timer(ex) {}
  // On the attempt's loop: ends the attempt unless it was disarmed already.
  void Fire(Fired why) {
    if (!armed) return;
    armed = false;
    fired = why;
    timer.cancel();
    own->Cancel();
  }

  asio::any_io_executor executor;
  asio::steady_timer timer;
  std::shared_ptr<http::Cancellation> own = std::make_shared<http::Cancellation>();
  bool armed = true;
  Fired fired = Fired::kNone;
};

AttemptWatch::AttemptWatch(asio::any_io_executor executor, const FleetWorker& worker,
                           std::shared_ptr<http::Cancellation> parent,
                           int64_t first_byte_timeout_ms)
    : state_(std::make_shared<State>(executor)), worker_(worker), parent_(std::move(parent)) {
  if (parent_) {
    if (parent_->cancelled()) {
      state_->own->Cancel();
    } else {
      parent_->Bind([own = state_->own] { own->Cancel(); });
    }
  }
  std::weak_ptr<State> weak = state_;
  waiter_ = worker_.liveness.AddWaiter([weak, executor] {
    asio::post(executor, [weak] {
      if (auto s = weak.lock()) s->Fire(Fired::kUnhealthy);
    });
  });
  // Picked just before its verdict flipped: the flip's notice went to nobody.
  if (!worker_.liveness.healthy()) {
    asio::post(executor, [weak] {
      if (auto s = weak.lock()) s->Fire(Fired::kUnhealthy);
    });
  }
  if (first_byte_timeout_ms > 0) {
    state_->timer.expires_after(std::chrono::milliseconds(first_byte_timeout_ms));
    state_->timer.async_wait([weak](const boost::system::error_code& ec) {
      if (ec) return;
      if (auto s = weak.lock()) s->Fire(Fired::kFirstByteTimeout);
    });
  }
}

AttemptWatch::~AttemptWatch() {
  Disarm();
  if (parent_) parent_->Unbind();
}

const std::shared_ptr<http::Cancellation>& AttemptWatch::cancel() const { return state_->own; }

AttemptWatch::Fired AttemptWatch::Disarm() {
  if (armed_) {
    armed_ = false;
    worker_.liveness.RemoveWaiter(waiter_);
    if (state_->armed) {
      state_->armed = false;
      state_->timer.cancel();
    }
  }
  return state_->fired;
}

}  // namespace infera::router
