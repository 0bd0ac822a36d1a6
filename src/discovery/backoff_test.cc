#include "discovery/backoff.h"

#include <gtest/gtest.h>

namespace infera::discovery {
namespace {

TEST(BackoffTest, GrowsWithinJitterBoundsAndCaps) {
  Backoff backoff(100, 1000, 42);
  int64_t base = 100;
  for (int i = 0; i < 20; ++i) {
    int64_t d = backoff.NextDelayMs();
    EXPECT_GE(d, base / 2) << i;
    EXPECT_LE(d, base) << i;
    base = std::min<int64_t>(1000, base * 2);
  }
}

TEST(BackoffTest, ResetStartsOver) {
  Backoff backoff(100, 1000, 42);
  for (int i = 0; i < 5; ++i) backoff.NextDelayMs();
  backoff.Reset();
  EXPECT_LE(backoff.NextDelayMs(), 100);
}

TEST(BackoffTest, SameSeedSameSequence) {
  Backoff a(10, 10000, 7);
  Backoff b(10, 10000, 7);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(a.NextDelayMs(), b.NextDelayMs());
}

}  // namespace
}  // namespace infera::discovery
