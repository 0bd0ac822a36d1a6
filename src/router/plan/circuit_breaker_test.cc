#include "router/plan/circuit_breaker.h"

#include <gtest/gtest.h>

namespace infera::router {
namespace {

TEST(CircuitBreakerTest, OpensHalfOpensAndCloses) {
  CircuitBreaker b(
      {.failure_threshold = 2, .cooldown_ms = 100, .max_cooldown_ms = 100, .probe_lease_ms = 0});
  const int64_t ms = 1'000'000;
  EXPECT_TRUE(b.Allow(0));
  b.OnFailure(0);
  EXPECT_EQ(b.state(), CircuitBreaker::State::kClosed);
  b.OnFailure(1 * ms);
  EXPECT_EQ(b.state(), CircuitBreaker::State::kOpen);
  EXPECT_FALSE(b.WouldAllow(50 * ms));
  EXPECT_FALSE(b.Allow(50 * ms));
  EXPECT_TRUE(b.Allow(101 * ms));  // the probe
  EXPECT_EQ(b.state(), CircuitBreaker::State::kHalfOpen);
  EXPECT_FALSE(b.Allow(102 * ms));  // one probe at a time
  b.OnFailure(103 * ms);            // probe failed: open again
  EXPECT_FALSE(b.Allow(150 * ms));
  EXPECT_TRUE(b.Allow(204 * ms));
  b.OnSuccess();
  EXPECT_EQ(b.state(), CircuitBreaker::State::kClosed);
  EXPECT_TRUE(b.Allow(205 * ms));
}

TEST(CircuitBreakerTest, AnUnreportedProbeHoldsItsSlotOnlyForTheLease) {
  // A probe whose outcome is never reported (an exception skipped the report) must not
  // keep the worker out of rotation forever.
  CircuitBreaker b(
      {.failure_threshold = 1, .cooldown_ms = 100, .max_cooldown_ms = 100, .probe_lease_ms = 1000});
  const int64_t ms = 1'000'000;
  b.OnFailure(0);
  EXPECT_TRUE(b.Allow(100 * ms));  // the probe; its report is lost
  EXPECT_FALSE(b.WouldAllow(1099 * ms));
  EXPECT_FALSE(b.Allow(1099 * ms));
  EXPECT_TRUE(b.WouldAllow(1100 * ms));
  EXPECT_TRUE(b.Allow(1100 * ms));   // the slot, taken anew
  EXPECT_FALSE(b.Allow(1101 * ms));  // and held by the new probe for its own lease
  b.OnSuccess();
  EXPECT_EQ(b.state(), CircuitBreaker::State::kClosed);
}

TEST(CircuitBreakerTest, WithoutALeaseAProbeSlotWaitsForItsReport) {
  CircuitBreaker b(
      {.failure_threshold = 1, .cooldown_ms = 100, .max_cooldown_ms = 100, .probe_lease_ms = 0});
  const int64_t ms = 1'000'000;
  b.OnFailure(0);
  EXPECT_TRUE(b.Allow(100 * ms));
  EXPECT_FALSE(b.Allow(1'000'000 * ms));
  b.OnAbandoned();
  EXPECT_TRUE(b.Allow(1'000'001 * ms));
}

// Infera's breaker (infera/router/breaker.py): a failed half-open probe reopens it with
// the cooldown doubled, up to the maximum; a success closes it and resets the cooldown.
TEST(CircuitBreakerTest, EachFailedProbeDoublesTheCooldownUpToTheMaximum) {
  CircuitBreaker b(
      {.failure_threshold = 3, .cooldown_ms = 5000, .max_cooldown_ms = 12000, .probe_lease_ms = 0});
  const int64_t s = 1'000'000'000;
  int64_t now = 0;
  b.OnFailure(now);
  b.OnFailure(now);
  EXPECT_EQ(b.state(), CircuitBreaker::State::kClosed);  // 2 < threshold 3
  b.OnFailure(now);
  EXPECT_EQ(b.state(), CircuitBreaker::State::kOpen);
  EXPECT_EQ(b.trips(), 1u);
  // Open for 5 s, then each failed probe: 10 s, 12 s (capped), 12 s.
  for (const int64_t cooldown_s : {5, 10, 12, 12}) {
    EXPECT_FALSE(b.WouldAllow(now + cooldown_s * s - 1)) << cooldown_s;
    now += cooldown_s * s;
    EXPECT_TRUE(b.Allow(now)) << cooldown_s;  // the probe
    EXPECT_EQ(b.state(), CircuitBreaker::State::kHalfOpen);
    b.OnFailure(now);  // a failed probe reopens at once, whatever the threshold
    EXPECT_EQ(b.state(), CircuitBreaker::State::kOpen);
  }
  EXPECT_EQ(b.trips(), 5u);
  EXPECT_EQ(b.cooldown_ns(), 12 * s);
  now += 12 * s;
  EXPECT_TRUE(b.Allow(now));
  b.OnSuccess();
  EXPECT_EQ(b.state(), CircuitBreaker::State::kClosed);
  EXPECT_EQ(b.cooldown_ns(), 5 * s);  // reset: the next trip waits the base cooldown
  for (int i = 0; i < 3; ++i) b.OnFailure(now);
  EXPECT_FALSE(b.WouldAllow(now + 5 * s - 1));
  EXPECT_TRUE(b.WouldAllow(now + 5 * s));
}

TEST(CircuitBreakerTest, AMaximumBelowTheCooldownMeansNoDoubling) {
  CircuitBreaker b(
      {.failure_threshold = 1, .cooldown_ms = 100, .max_cooldown_ms = 0, .probe_lease_ms = 0});
  const int64_t ms = 1'000'000;
  b.OnFailure(0);
  EXPECT_TRUE(b.Allow(100 * ms));
  b.OnFailure(100 * ms);
  EXPECT_TRUE(b.WouldAllow(200 * ms));
}

TEST(CircuitBreakerTest, AFailureWhileOpenKeepsItOpenWithoutDoubling) {
  // A request admitted before the breaker opened reports late: open from now for the
  // current cooldown (Infera counts it as a trip too; the cooldown does not double).
  CircuitBreaker b(
      {.failure_threshold = 1, .cooldown_ms = 100, .max_cooldown_ms = 1000, .probe_lease_ms = 0});
  const int64_t ms = 1'000'000;
  b.OnFailure(0);
  b.OnFailure(50 * ms);
  EXPECT_FALSE(b.WouldAllow(149 * ms));
  EXPECT_TRUE(b.WouldAllow(150 * ms));
  EXPECT_EQ(b.cooldown_ns(), 100 * ms);
}

TEST(CircuitBreakerTest, ThresholdZeroTurnsTheBreakerOff) {
  // Infera: "A threshold of 0 or less turns the breaker off entirely".
  CircuitBreaker b(
      {.failure_threshold = 0, .cooldown_ms = 100, .max_cooldown_ms = 1000, .probe_lease_ms = 0});
  for (int i = 0; i < 100; ++i) b.OnFailure(i);
  EXPECT_EQ(b.state(), CircuitBreaker::State::kClosed);
  EXPECT_TRUE(b.Allow(100));
  EXPECT_EQ(b.trips(), 0u);
}

}  // namespace
}  // namespace infera::router
