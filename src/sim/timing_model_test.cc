#include "sim/timing_model.h"

#include <gtest/gtest.h>

#include <cmath>

namespace infera::sim {
namespace {

TEST(TimingModelTest, DefaultPolynomials) {
  TimingModel t;
  EXPECT_NEAR(t.PrefillMs(0), 16.50142, 1e-9);
  EXPECT_NEAR(t.PrefillMs(1000), 4.209989e-1 + 15.18344 + 16.50142, 1e-9);
  EXPECT_NEAR(t.DecodeMs(0.0), 5.74, 1e-9);
  EXPECT_NEAR(t.DecodeMs(0.5), -25.74 * 0.25 + 54.01 * 0.5 + 5.74, 1e-9);
}

TEST(TimingModelTest, DecodeHasFloor) {
  TimingModel t;
  t.decode_b0 = -100;
  EXPECT_DOUBLE_EQ(t.DecodeMs(0.0), 1.0);
}

TEST(TimingModelTest, StepSumsPrefillAndDecodeAndAppliesSpeedup) {
  TimingModel t;
  const double ms = t.PrefillMs(512) + t.DecodeMs(0.25);
  EXPECT_EQ(t.StepNs(512, 3, 0.25), static_cast<int64_t>(std::llround(ms * 1e6)));
  EXPECT_EQ(t.StepNs(0, 0, 0.0), 0);
  t.speedup = 4;
  EXPECT_EQ(t.StepNs(512, 3, 0.25), static_cast<int64_t>(std::llround(ms * 1e6 / 4)));
  EXPECT_EQ(t.StepNs(0, 1, 0.0), static_cast<int64_t>(std::llround(5.74e6 / 4)));
}

TEST(TimingModelTest, IdlePrefillIsOneStepPerChunk) {
  TimingModel t;
  EXPECT_EQ(t.IdlePrefillNs(100, 8192), t.StepNs(100, 0, 0.0));
  EXPECT_EQ(t.IdlePrefillNs(0, 8192), t.StepNs(1, 0, 0.0));  // at least one token
  EXPECT_EQ(t.IdlePrefillNs(20000, 8192), 2 * t.StepNs(8192, 0, 0.0) + t.StepNs(3616, 0, 0.0));
}

}  // namespace
}  // namespace infera::sim
