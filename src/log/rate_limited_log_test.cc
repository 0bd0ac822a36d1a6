#include "log/rate_limited_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <memory>
#include <sstream>
#include <string>

namespace infera::log {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// Captures what spdlog's default logger writes while the test runs.
class Captured {
 public:
  Captured() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_pattern("%l %v");
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~Captured() { spdlog::set_default_logger(previous_); }
  // The lines written since the last call.
  std::vector<std::string> Take() {
    std::vector<std::string> lines;
    std::string line;
    std::istringstream in(out_.str());
    while (std::getline(in, line)) lines.push_back(line);
    out_.str("");
    return lines;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

TEST(RateLimitedLogTest, WritesABurstPerKeyAndIntervalThenOneSummary) {
  Captured log;
  core::ManualClock clock(100 * kSecond);
  RateLimitedLog limited({.interval_ns = 10 * kSecond, .burst = 3}, &clock);
  for (int i = 0; i < 1000; ++i) limited.Warn("bad batch|w1", "bad batch {} from w1", i);
  EXPECT_EQ(log.Take(),
            (std::vector<std::string>{"warning bad batch 0 from w1", "warning bad batch 1 from w1",
                                      "warning bad batch 2 from w1"}));
  EXPECT_EQ(limited.suppressed_total(), 997u);
  // Another key is not silenced by the first.
  limited.Info("restart|w2", "w2 restarted");
  EXPECT_EQ(log.Take(), std::vector<std::string>{"info w2 restarted"});
  // Before the interval ends, Flush has nothing to say.
  clock.Advance(9 * kSecond);
  limited.Flush();
  EXPECT_TRUE(log.Take().empty());
  // At its end, the summary (at the level of the suppressed lines).
  clock.Advance(kSecond);
  limited.Flush();
  EXPECT_EQ(log.Take(),
            std::vector<std::string>{"warning bad batch|w1: 997 more lines suppressed in the last "
                                     "10 s (at most 3 per 10 s per key)"});
  limited.Flush();
  EXPECT_TRUE(log.Take().empty());  // once
  // A new interval: a new burst.
  limited.Warn("bad batch|w1", "again");
  EXPECT_EQ(log.Take(), std::vector<std::string>{"warning again"});
}

TEST(RateLimitedLogTest, TheKeysNextLineWritesTheSummaryWhenNoFlushCame) {
  Captured log;
  core::ManualClock clock;
  RateLimitedLog limited({.interval_ns = kSecond, .burst = 1}, &clock);
  limited.Warn("k", "one");
  limited.Warn("k", "two");
  limited.Warn("k", "three");
  clock.Advance(2 * kSecond);
  limited.Warn("k", "four");
  EXPECT_EQ(log.Take(), (std::vector<std::string>{
                            "warning one",
                            "warning k: 2 more lines suppressed in the last 1 s (at most 1 per 1 s "
                            "per key)",
                            "warning four"}));
}

TEST(RateLimitedLogTest, KeysAreBoundedAndForgottenWhenQuiet) {
  Captured log;
  core::ManualClock clock;
  RateLimitedLog limited({.interval_ns = kSecond, .burst = 1, .max_keys = 4}, &clock);
  // A hostile source naming a new key each time: past 4 keys they share one.
  for (int i = 0; i < 100; ++i) limited.Warn("k" + std::to_string(i), "line {}", i);
  EXPECT_EQ(log.Take().size(), 4u + 1u);  // 4 keys, then one line of the shared key
  EXPECT_EQ(limited.suppressed_total(), 95u);
  clock.Advance(kSecond);
  limited.Flush();
  const auto lines = log.Take();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("(other keys): 95 more lines suppressed"), std::string::npos);
  // Every key was forgotten: new ones are followed again.
  limited.Warn("fresh", "fresh line");
  EXPECT_EQ(log.Take(), std::vector<std::string>{"warning fresh line"});
}

TEST(RateLimitedLogTest, LinesBelowTheLoggersLevelCostNothing) {
  Captured log;
  core::ManualClock clock;
  RateLimitedLog limited({.burst = 1}, &clock);
  limited.Log(spdlog::level::debug, "d", "debug {}", 1);
  limited.Log(spdlog::level::debug, "d", "debug {}", 2);
  EXPECT_TRUE(log.Take().empty());
  EXPECT_EQ(limited.suppressed_total(), 0u);
}

}  // namespace
}  // namespace infera::log
