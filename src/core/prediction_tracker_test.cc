#include "core/prediction_tracker.h"

#include <gtest/gtest.h>

namespace infera::core {
namespace {

TEST(PredictionTrackerTest, AccuratePredictionsAreNotFlagged) {
  PredictionTracker t;
  for (int i = 0; i < 50; ++i) t.Record(0, 160, i % 2 == 0 ? 160 : 144);  // off by a block
  const PredictionStats s = t.Get(0);
  EXPECT_EQ(s.samples, 50u);
  EXPECT_FALSE(s.drifting);
  EXPECT_LT(s.relative_error, 0.1);
  EXPECT_LE(s.abs_error_tokens, 16.0);
  EXPECT_EQ(t.Trust(0), 1.0);
  // Both zero (a cold prompt the router knew was cold) is agreement.
  t.Record(1, 0, 0);
  EXPECT_EQ(t.Get(1).relative_error, 0);
}

TEST(PredictionTrackerTest, ATargetWhoseCacheDiffersFromItsViewIsFlaggedThenTrustedLess) {
  PredictionTracker t;
  // The view promises 10 blocks, the engine serves none (e.g. its hash seed changed).
  for (int i = 0; i < 7; ++i) t.Record(3, 160, 0);
  EXPECT_FALSE(t.Get(3).drifting);  // fewer than min_samples
  t.Record(3, 160, 0);
  EXPECT_TRUE(t.Get(3).drifting);
  EXPECT_DOUBLE_EQ(t.Get(3).relative_error, 1.0);
  EXPECT_DOUBLE_EQ(t.Get(3).abs_error_tokens, 160.0);
  EXPECT_EQ(t.Trust(3), t.options().drifting_trust);
  EXPECT_EQ(t.Get(3).predicted_tokens, 8u * 160);
  EXPECT_EQ(t.Get(3).reported_tokens, 0u);
  // Under-prediction (events lost: the engine holds more than the view) drifts too.
  for (int i = 0; i < 8; ++i) t.Record(4, 0, 320);
  EXPECT_TRUE(t.Get(4).drifting);
  // Recovery: the flag clears once the error is below half the threshold.
  for (int i = 0; i < 3; ++i) t.Record(3, 160, 160);
  EXPECT_TRUE(t.Get(3).drifting);  // 0.8^3 = 0.51 still above 0.25
  for (int i = 0; i < 4; ++i) t.Record(3, 160, 160);
  EXPECT_FALSE(t.Get(3).drifting);
  EXPECT_EQ(t.Trust(3), 1.0);
  t.RemoveTarget(4);
  EXPECT_EQ(t.Get(4).samples, 0u);
}

TEST(PredictionTrackerTest, PredictedHitTokensLeaveTheLastPromptTokenToCompute) {
  EXPECT_EQ(PredictedHitTokens(20, 360, 16), 320u);  // 22 full blocks, 20 held
  EXPECT_EQ(PredictedHitTokens(4, 64, 16), 48u);     // fully held: the last block is run
  EXPECT_EQ(PredictedHitTokens(4, 65, 16), 64u);
  EXPECT_EQ(PredictedHitTokens(0, 100, 16), 0u);
  EXPECT_EQ(PredictedHitTokens(3, 0, 16), 0u);
}

}  // namespace
}  // namespace infera::core
