#include "router/circuit_breaker.h"

#include <gtest/gtest.h>

namespace infera::router {
namespace {

TEST(CircuitBreakerTest, OpensHalfOpensAndCloses) {
  CircuitBreaker b(/*failure_threshold=*/2, /*cooldown_ms=*/100);
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
  CircuitBreaker b(/*failure_threshold=*/1, /*cooldown_ms=*/100, /*probe_lease_ms=*/1000);
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
  CircuitBreaker b(/*failure_threshold=*/1, /*cooldown_ms=*/100);
  const int64_t ms = 1'000'000;
  b.OnFailure(0);
  EXPECT_TRUE(b.Allow(100 * ms));
  EXPECT_FALSE(b.Allow(1'000'000 * ms));
  b.OnAbandoned();
  EXPECT_TRUE(b.Allow(1'000'001 * ms));
}

}  // namespace
}  // namespace infera::router
