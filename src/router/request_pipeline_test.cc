#include "router/request_pipeline.h"

#include <gtest/gtest.h>

namespace infera::router {
namespace {

TEST(ViaIsLoopTest, OwnIdOrTooManyHops) {
  EXPECT_FALSE(ViaIsLoop("", "r1", 8));
  EXPECT_FALSE(ViaIsLoop("r0", "r1", 8));
  EXPECT_TRUE(ViaIsLoop("r1", "r1", 8));
  EXPECT_TRUE(ViaIsLoop("r0, r1", "r1", 8));
  EXPECT_TRUE(ViaIsLoop(" r0 ,\tr1\t, r2", "r1", 8));
  EXPECT_FALSE(ViaIsLoop("r10, xr1, r1x", "r1", 8));  // ids compare exactly
  EXPECT_FALSE(ViaIsLoop(", ,", "r1", 8));
  EXPECT_FALSE(ViaIsLoop("a, b, c", "r1", 4));
  EXPECT_TRUE(ViaIsLoop("a, b, c, d", "r1", 4));
}

}  // namespace
}  // namespace infera::router
