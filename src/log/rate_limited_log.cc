#include "log/rate_limited_log.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "log/steady_clock.h"

namespace infera::log {
namespace {

// Where lines go once max_keys keys are followed.
constexpr std::string_view kOverflowKey = "(other keys)";

}  // namespace

RateLimitedLog::RateLimitedLog(RateLimitOptions options, const core::Clock* clock)
    : options_(options), clock_(clock != nullptr ? *clock : ProcessSteadyClock()) {}

bool RateLimitedLog::Admit(spdlog::level::level_enum level, std::string_view key) {
  const int64_t now = clock_.NowNs();
  std::optional<Summary> summary;
  bool admit = false;
  {
    base::MutexLock lock(mu_);
    auto it = keys_.find(absl::string_view(key.data(), key.size()));
    if (it == keys_.end()) {
      if (keys_.size() >= options_.max_keys) key = kOverflowKey;
      it = keys_.try_emplace(std::string(key), Key{.window_start_ns = now}).first;
    }
    Key& k = it->second;
    if (now - k.window_start_ns >= options_.interval_ns) {
      if (k.suppressed > 0) summary = Summary{it->first, k.suppressed, k.level};
      k = Key{.window_start_ns = now};
    }
    if (k.written < options_.burst) {
      ++k.written;
      admit = true;
    } else {
      if (k.suppressed == 0) {
        next_summary_ns_ = std::min(next_summary_ns_, k.window_start_ns + options_.interval_ns);
      }
      ++k.suppressed;
      k.level = std::max(k.level, level);
      ++suppressed_total_;
    }
  }
  if (summary) Write(*summary);
  return admit;
}

void RateLimitedLog::Flush() {
  const int64_t now = clock_.NowNs();
  std::vector<Summary> due;
  {
    base::MutexLock lock(mu_);
    // Nothing due, and the keys still fit: nothing to do.
    if (now < next_summary_ns_ && keys_.size() < options_.max_keys / 2) return;
    next_summary_ns_ = INT64_MAX;
    for (auto it = keys_.begin(); it != keys_.end();) {
      const Key& k = it->second;
      if (now - k.window_start_ns >= options_.interval_ns) {
        // The window ended: its summary now; the key starts afresh on its next line.
        if (k.suppressed > 0) due.push_back({it->first, k.suppressed, k.level});
        keys_.erase(it++);
        continue;
      }
      if (k.suppressed > 0) {
        next_summary_ns_ = std::min(next_summary_ns_, k.window_start_ns + options_.interval_ns);
      }
      ++it;
    }
  }
  for (const Summary& s : due) Write(s);
}

uint64_t RateLimitedLog::suppressed_total() const {
  base::MutexLock lock(mu_);
  return suppressed_total_;
}

void RateLimitedLog::Write(const Summary& s) const {
  const double interval_s = static_cast<double>(options_.interval_ns) / 1e9;
  spdlog::log(s.level,
              "{}: {} more lines suppressed in the last {:g} s (at most {} per {:g} s per key)",
              s.key, s.suppressed, interval_s, options_.burst, interval_s);
}

}  // namespace infera::log
