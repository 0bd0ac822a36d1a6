#include "progress_bar.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace infera::bench {

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total), enabled_(isatty(STDERR_FILENO) == 1) {
  if (!enabled_) return;
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      Draw();
      cv_.wait_for(lock, std::chrono::milliseconds(200));
    }
  });
}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Draw() {
  const uint64_t done = std::min(done_.load(std::memory_order_relaxed), total_);
  const double frac = total_ == 0 ? 1.0 : static_cast<double>(done) / total_;
  constexpr int kWidth = 40;
  const int fill = static_cast<int>(frac * kWidth);
  std::string bar(fill, '#');
  bar.append(kWidth - fill, '.');
  std::fprintf(stderr, "\r%s [%s] %5.1f%%", label_.c_str(), bar.c_str(), 100 * frac);
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (!enabled_ || !thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  Draw();
  std::fprintf(stderr, "\n");
}

}  // namespace infera::bench
