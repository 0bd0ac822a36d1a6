// ProgressBar: a one-line progress bar on stderr, drawn only when stderr is a
// terminal. Work items add to a shared counter from any thread; a background
// thread redraws a few times per second until Finish().
//
// Thread-safety: Add() from any thread; construct/Finish() from one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace infera::bench {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total);
  ~ProgressBar();
  void Add(uint64_t n) { done_.fetch_add(n, std::memory_order_relaxed); }
  void Finish();

 private:
  void Draw();
  std::string label_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  bool enabled_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace infera::bench
