#include "http/io_pool.h"

namespace infera::http {
namespace {
thread_local int current_index = -1;
}  // namespace

IoPool::IoPool(int thread_count) {
  for (int i = 0; i < thread_count; ++i) {
    contexts_.push_back(std::make_unique<asio::io_context>(1));
  }
}

IoPool::~IoPool() { Stop(); }

int IoPool::NextIndex() {
  return static_cast<int>(next_.fetch_add(1, std::memory_order_relaxed) % contexts_.size());
}

void IoPool::Start() {
  for (size_t i = 0; i < contexts_.size(); ++i) {
    contexts_[i]->restart();
    guards_.push_back(asio::make_work_guard(*contexts_[i]));
    threads_.emplace_back([this, i] {
      current_index = static_cast<int>(i);
      contexts_[i]->run();
      current_index = -1;
    });
  }
}

void IoPool::Stop() {
  guards_.clear();
  for (auto& c : contexts_) c->stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

int IoPool::CurrentIndex() { return current_index; }

int IoPool::HardwareThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace infera::http
