// RateLimitedLog: at most a few log lines per key and interval, and a summary line of
// what was suppressed (doc/router.md "Rate-limited logging").
//
// A warning that an outside party can trigger at will (one per KV event, per worker
// record, per request) must not flood the log: one malformed publisher wrote 68,939
// warnings (8.2 MB) in 8 s (issue 22). Each call names a key: the site and what it is
// about ("kv events: undecodable batch|<target>"), so one noisy source does not
// silence another. Per key, the first `burst` lines of each `interval` are written;
// the rest are counted, not even formatted. When that interval has ended, one line
// says how many were suppressed:
//   [warning] kv events: undecodable batch|127.0.0.1:30001: 68936 more lines
//   suppressed in the last 10 s (at most 3 per 10 s per key)
// It is written by the key's next call, or by Flush() (call it periodically, e.g. on
// a loop's tick), whichever comes first. Keys are bounded (`max_keys`): past them,
// further keys share one.
//
// Example:
//   log::RateLimitedLog limited;   // the real clock; tests inject a ManualClock
//   limited.Warn("kv events: undecodable batch|" + name, "kv events: {} seq {}: {}", ...);
//   limited.Flush();               // from a periodic tick
//
// Thread-safety: every method may be called from any thread (one mutex, held to
// count; formatting and writing happen outside it).
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "base/mutex.h"
#include "core/clock.h"

namespace infera::log {

struct RateLimitOptions {
  int64_t interval_ns = 10'000'000'000;  // 10 s
  uint32_t burst = 3;                    // lines written per key per interval
  size_t max_keys = 1024;                // distinct keys followed; past it they share one
};

class RateLimitedLog {
 public:
  // `clock` (nullptr: the process's steady clock) must outlive the log.
  explicit RateLimitedLog(RateLimitOptions options = {}, const core::Clock* clock = nullptr);
  RateLimitedLog(const RateLimitedLog&) = delete;
  RateLimitedLog& operator=(const RateLimitedLog&) = delete;

  template <typename... Args>
  void Log(spdlog::level::level_enum level, std::string_view key,
           spdlog::format_string_t<Args...> fmt, Args&&... args) {
    if (!spdlog::should_log(level) || !Admit(level, key)) return;
    spdlog::log(level, fmt, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Warn(std::string_view key, spdlog::format_string_t<Args...> fmt, Args&&... args) {
    Log(spdlog::level::warn, key, fmt, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Info(std::string_view key, spdlog::format_string_t<Args...> fmt, Args&&... args) {
    Log(spdlog::level::info, key, fmt, std::forward<Args>(args)...);
  }

  // Writes the summary of every key whose interval ended with lines suppressed, and
  // forgets keys that have been quiet for a whole interval. Cheap when there is
  // nothing to write (one clock read).
  void Flush();

  // Lines suppressed since construction (tests).
  uint64_t suppressed_total() const;

 private:
  struct Key {
    int64_t window_start_ns = 0;
    uint32_t written = 0;                                   // lines written in the window
    uint64_t suppressed = 0;                                // lines suppressed in the window
    spdlog::level::level_enum level = spdlog::level::info;  // highest suppressed
  };
  struct Summary {
    std::string key;
    uint64_t suppressed;
    spdlog::level::level_enum level;
  };
  // Whether a line of `key` is written now; writes the key's pending summary first.
  bool Admit(spdlog::level::level_enum level, std::string_view key);
  void Write(const Summary& s) const;

  const RateLimitOptions options_;
  const core::Clock& clock_;
  mutable base::Mutex mu_;
  absl::flat_hash_map<std::string, Key> keys_ ABSL_GUARDED_BY(mu_);
  // The earliest end of a window with lines suppressed (INT64_MAX: none).
  int64_t next_summary_ns_ ABSL_GUARDED_BY(mu_) = INT64_MAX;
  uint64_t suppressed_total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace infera::log
