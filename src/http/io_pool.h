// IoPool: N event loops, one thread each ("thread per core").
//
// Every accepted connection and every upstream connection lives on exactly one
// loop for its whole life, so per-connection state needs no locks. Objects that
// must exist once per loop (the upstream connection pool) are indexed by
// CurrentIndex().
//
// Thread-safety: Start/Stop/Join from one controlling thread; executor(i) and
// CurrentIndex() from anywhere.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "http/asio.h"

namespace infera::http {

class IoPool {
 public:
  // REQUIRES: thread_count >= 1.
  explicit IoPool(int thread_count);
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  int size() const { return static_cast<int>(contexts_.size()); }
  asio::io_context& context(int i) { return *contexts_[static_cast<size_t>(i)]; }
  asio::any_io_executor executor(int i) {
    return contexts_[static_cast<size_t>(i)]->get_executor();
  }
  // Round-robin choice of a loop for a new connection. Thread-safe.
  int NextIndex();

  // Runs each loop on its own thread until Stop().
  void Start();
  // Stops every loop (pending handlers are dropped) and joins the threads.
  void Stop();

  // Index of the loop running on the calling thread, or -1 outside the pool.
  static int CurrentIndex();

  // Number of hardware threads, at least 1.
  static int HardwareThreads();

 private:
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::vector<std::thread> threads_;
  std::atomic<unsigned> next_{0};
};

}  // namespace infera::http
