#include "events/sequence_tracker.h"

#include <gtest/gtest.h>

namespace infera::events {
namespace {

using Class = SequenceTracker::Class;

TEST(SequenceTracker, ClassifiesAgainstTheLastAppliedSeq) {
  SequenceTracker t;
  EXPECT_EQ(t.Classify(0), Class::kNext);
  EXPECT_EQ(t.Classify(7), Class::kFirst);
  EXPECT_TRUE(t.IsNext(0));
  EXPECT_FALSE(t.AlreadyApplied(0));
  t.Advance(10);
  EXPECT_EQ(t.Classify(11), Class::kNext);
  EXPECT_EQ(t.Classify(12), Class::kGap);
  EXPECT_EQ(t.Classify(10), Class::kDuplicate);
  EXPECT_EQ(t.Classify(3), Class::kDuplicate);
  EXPECT_EQ(t.Classify(0), Class::kRestart);
  EXPECT_TRUE(t.AlreadyApplied(10));
  EXPECT_FALSE(t.AlreadyApplied(11));
  t.Reset();
  EXPECT_FALSE(t.last().has_value());
  EXPECT_EQ(t.Classify(0), Class::kNext);
}

TEST(SequenceTracker, HandlesTheTopOfTheRange) {
  SequenceTracker t;
  t.Advance(~uint64_t{0} - 1);
  EXPECT_EQ(t.Classify(~uint64_t{0}), Class::kNext);
  t.Advance(0);
  EXPECT_EQ(t.Classify(1), Class::kNext);
}

}  // namespace
}  // namespace infera::events
