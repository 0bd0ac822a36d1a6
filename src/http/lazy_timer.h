// LazyTimer: the deadline of a connection's I/O with one timer wait per connection,
// re-armed lazily (doc/perf-router.md).
//
// Beast's tcp_stream arms and cancels a timer around every operation; a proxy does
// four operations per request. Here Set() and Clear() only move the deadline (a store,
// and a timer operation only when the new deadline is earlier than the one the pending
// wait sleeps until); the wait, when it wakes, sleeps again until the current deadline,
// and runs `on_expiry` only when that deadline has passed.
//
//   LazyTimer timer(executor, [this] { timed_out_ = true; socket_.close(); });
//   timer.Set(deadline, shared_from_this());  // `keep`: alive while the wait pends
//   co_await socket_.async_read_some(...);
//   timer.Clear();
//   ...
//   timer.Stop();  // at the end: the pending wait completes now (it holds `keep`)
//
// Thread-safety: one loop (the executor's); `on_expiry` runs there.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "http/asio.h"

namespace infera::http {

class LazyTimer {
 public:
  using Clock = asio::steady_timer::clock_type;

  LazyTimer(const asio::any_io_executor& executor, std::function<void()> on_expiry)
      : timer_(executor), on_expiry_(std::move(on_expiry)) {}
  LazyTimer(const LazyTimer&) = delete;
  LazyTimer& operator=(const LazyTimer&) = delete;

  // The deadline is `at` from now on; `keep` is held by the wait (the owner of this
  // timer and of what on_expiry touches).
  void Set(Clock::time_point at, const std::shared_ptr<void>& keep) {
    at_ = at;
    if (!pending_ || timer_.expiry() > at_) StartWait(keep);
  }
  void SetAfter(std::chrono::milliseconds ms, const std::shared_ptr<void>& keep) {
    Set(Clock::now() + ms, keep);
  }
  // No deadline (the pending wait, if any, goes back to sleep when it wakes).
  void Clear() { at_ = Clock::time_point::max(); }
  // At the end of the owner's use: the pending wait completes now, without effect.
  void Stop() {
    Clear();
    ++gen_;
    if (pending_) {
      pending_ = false;
      timer_.cancel();
    }
  }

 private:
  void StartWait(std::shared_ptr<void> keep) {
    const uint64_t gen = ++gen_;
    pending_ = true;
    timer_.expires_at(at_);  // a pending wait completes as superseded
    timer_.async_wait([this, gen, keep = std::move(keep)](const boost::system::error_code& ec) {
      if (gen != gen_) return;  // superseded or stopped
      pending_ = false;
      if (ec || at_ == Clock::time_point::max()) return;
      if (Clock::now() < at_) {
        StartWait(keep);  // moved on since this wait began
        return;
      }
      Clear();
      on_expiry_();
    });
  }

  asio::steady_timer timer_;
  std::function<void()> on_expiry_;
  Clock::time_point at_ = Clock::time_point::max();
  bool pending_ = false;
  uint64_t gen_ = 0;
};

}  // namespace infera::http
