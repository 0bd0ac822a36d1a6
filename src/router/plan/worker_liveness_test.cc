#include "router/plan/worker_liveness.h"

#include <gtest/gtest.h>

namespace infera::router {
namespace {

TEST(HealthVerdictTest, FailuresInARowTakeItOutSuccessesInARowBringItBack) {
  HealthVerdict v({.unhealthy_after = 3, .healthy_after = 2});
  EXPECT_TRUE(v.healthy());  // a new worker is routable until a probe says otherwise
  EXPECT_FALSE(v.Record(false));
  EXPECT_FALSE(v.Record(false));
  EXPECT_FALSE(v.Record(true));  // a pass in between starts the count anew
  EXPECT_FALSE(v.Record(false));
  EXPECT_FALSE(v.Record(false));
  EXPECT_TRUE(v.healthy());
  EXPECT_TRUE(v.Record(false));  // the third in a row flips it
  EXPECT_FALSE(v.healthy());
  EXPECT_FALSE(v.Record(false));  // already unhealthy: no flip
  EXPECT_EQ(v.consecutive_failures(), 4u);
  EXPECT_FALSE(v.Record(true));
  EXPECT_FALSE(v.Record(false));
  EXPECT_FALSE(v.Record(true));
  EXPECT_TRUE(v.Record(true));  // two passes in a row bring it back
  EXPECT_TRUE(v.healthy());
  EXPECT_EQ(v.checks(), 11u);
}

TEST(HealthVerdictTest, ThresholdsOfZeroCountAsOne) {
  HealthVerdict v({.unhealthy_after = 0, .healthy_after = 0});
  EXPECT_TRUE(v.Record(false));
  EXPECT_TRUE(v.Record(true));
}

TEST(WorkerLivenessTest, TheFlipToUnhealthyTellsEveryWaiterOnce) {
  WorkerLiveness l({.unhealthy_after = 2, .healthy_after = 1});
  int a = 0, b = 0, c = 0;
  const uint64_t ida = l.AddWaiter([&] { ++a; });
  const uint64_t idb = l.AddWaiter([&] { ++b; });
  l.RemoveWaiter(idb);  // its head arrived: no longer waiting
  EXPECT_EQ(l.Record(false, "no answer within 3000 ms", 10).waiters, 0u);
  const WorkerLiveness::Recorded r = l.Record(false, "no answer within 3000 ms", 20);
  EXPECT_TRUE(r.flipped);
  EXPECT_FALSE(r.healthy);
  EXPECT_EQ(r.consecutive, 2u);
  EXPECT_EQ(r.waiters, 1u);
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 0);
  EXPECT_FALSE(l.healthy());
  // A waiter added while unhealthy is not told by later failures (AttemptWatch checks
  // healthy() itself when it starts).
  l.AddWaiter([&] { ++c; });
  l.Record(false, "refused", 30);
  EXPECT_EQ(c, 0);
  EXPECT_EQ(a, 1);
  const WorkerLiveness::Snapshot s = l.snapshot();
  EXPECT_FALSE(s.healthy);
  EXPECT_EQ(s.consecutive_failures, 3u);
  EXPECT_EQ(s.last_error, "refused");
  EXPECT_EQ(s.last_check_ns, 30);
  EXPECT_TRUE(l.Record(true, "", 40).flipped);
  EXPECT_TRUE(l.healthy());
  EXPECT_EQ(l.snapshot().last_error, "refused");  // kept for the operator
  l.RemoveWaiter(ida);
  EXPECT_EQ(l.waiters(), 1u);
}

}  // namespace
}  // namespace infera::router
