// WorkPool: the router's worker threads for work proportional to a request's size,
// so that no event loop runs it (doc/router.md "Limits and hostile input").
//
// One pool per router (--tokenize-threads, default max(1, cores / 2)): the prompt
// encoder renders and tokenizes prompts of kMinBytes and more on it, and the request
// pipeline parses, validates and translates bodies of kMinBytes and more on it.
//
//   std::string out = co_await pool.Run([&] { return Expensive(body); });
//
// Run() moves the calling coroutine's work to a pool thread and resumes the caller
// on its own executor (its event loop) with the result; an exception of `fn` is
// rethrown there. queued() counts the jobs running or waiting, for callers that
// would rather degrade than queue (the encoder's estimate).
//
// Thread-safety: Run() from any thread; the destructor joins (a running job finishes
// first; waiting jobs whose loops stopped are dropped with their frames).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>

#include "http/asio.h"

namespace infera::router {

class WorkPool {
 public:
  // Bodies and prompts of at least this many bytes go to the pool: below it the
  // work costs less than the hop between threads.
  static constexpr size_t kMinBytes = 16u << 10;

  // threads 0: max(1, hardware threads / 2).
  explicit WorkPool(int threads)
      : threads_(threads > 0
                     ? threads
                     : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2)),
        pool_(std::make_unique<http::asio::thread_pool>(static_cast<size_t>(threads_))) {}
  ~WorkPool() { pool_->join(); }
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  int threads() const { return threads_; }
  int queued() const { return queued_.load(std::memory_order_relaxed); }

  // Runs fn() on a pool thread; the caller resumes on its executor with the result.
  // REQUIRES: what fn references outlives the co_await (the caller's frame does).
  template <typename Fn>
  http::Awaitable<std::invoke_result_t<Fn&>> Run(Fn fn) {
    using Result = std::invoke_result_t<Fn&>;
    queued_.fetch_add(1, std::memory_order_relaxed);
    // Not an RAII guard: a frame destroyed unresumed at shutdown must not touch us.
    std::exception_ptr error;
    std::optional<Result> result;
    try {
      result.emplace(co_await http::asio::co_spawn(
          pool_->get_executor(), [&]() -> http::Awaitable<Result> { co_return fn(); },
          http::asio::use_awaitable));
    } catch (...) {
      error = std::current_exception();
    }
    queued_.fetch_sub(1, std::memory_order_relaxed);
    if (error) std::rethrow_exception(error);
    co_return std::move(*result);
  }

 private:
  const int threads_;
  std::atomic<int> queued_{0};
  std::unique_ptr<http::asio::thread_pool> pool_;
};

}  // namespace infera::router
