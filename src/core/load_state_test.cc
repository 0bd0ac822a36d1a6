#include "core/load_state.h"

#include <gtest/gtest.h>

#include <optional>
#include <utility>

namespace infera::core {
namespace {

const std::vector<BlockHash> kPrefix = {1, 2, 3, 4};

std::vector<BlockHash> With(std::vector<BlockHash> chain, std::vector<BlockHash> more) {
  chain.insert(chain.end(), more.begin(), more.end());
  return chain;
}

TEST(LoadStateTest, SharedPrefixIsCountedOnce) {
  LoadState load;
  auto a = load.AddActive(0, With(kPrefix, {10, 11}));
  EXPECT_EQ(load.ActiveBlocks(0), 6u);
  auto b = load.AddActive(0, With(kPrefix, {20}));
  EXPECT_EQ(load.ActiveBlocks(0), 7u);  // 4 shared + 2 + 1
  a.Release();
  EXPECT_EQ(load.ActiveBlocks(0), 5u);  // the prefix stays while b is in flight
  b.Release();
  EXPECT_EQ(load.ActiveBlocks(0), 0u);
  EXPECT_EQ(load.ActiveBlocks(1), 0u);  // other targets untouched
}

TEST(LoadStateTest, AnonymousBlocksAreNeverShared) {
  LoadState load;
  auto a = load.AddActive(3, {}, 5);
  auto b = load.AddActive(3, kPrefix, 5);
  EXPECT_EQ(load.ActiveBlocks(3), 14u);
  EXPECT_EQ(a.block_count(), 5u);
  EXPECT_EQ(b.block_count(), 9u);
  a.Release();
  EXPECT_EQ(load.ActiveBlocks(3), 9u);
}

TEST(LoadStateTest, ExplicitReleaseThenDestructorReleasesOnce) {
  LoadState load;
  auto keep = load.AddActive(0, kPrefix);  // holds the same blocks throughout
  {
    auto g = load.AddActive(0, kPrefix);
    EXPECT_TRUE(g.pending());
    g.Release();
    EXPECT_FALSE(g.pending());
    g.Release();  // second call: no effect
    EXPECT_EQ(load.PendingGuards(), 1u);
  }  // destructor: no effect
  EXPECT_EQ(load.ActiveBlocks(0), 4u);
  EXPECT_EQ(load.PendingGuards(), 1u);
}

TEST(LoadStateTest, DestructorReleases) {
  LoadState load;
  { auto g = load.AddActive(0, kPrefix); }
  EXPECT_EQ(load.ActiveBlocks(0), 0u);
  EXPECT_EQ(load.PendingGuards(), 0u);
}

TEST(LoadStateTest, MoveTransfersTheObligation) {
  LoadState load;
  auto keep = load.AddActive(0, kPrefix);
  std::optional<LoadState::ActiveGuard> holder;
  {
    auto g = load.AddActive(0, With(kPrefix, {9}));
    holder.emplace(std::move(g));
    EXPECT_FALSE(g.pending());  // NOLINT(bugprone-use-after-move): the contract
  }
  EXPECT_EQ(load.ActiveBlocks(0), 5u);  // the moved-from guard released nothing
  LoadState::ActiveGuard other = std::move(*holder);
  holder.reset();
  EXPECT_EQ(load.ActiveBlocks(0), 5u);
  other = LoadState::ActiveGuard();  // assignment releases the held guard first
  EXPECT_EQ(load.ActiveBlocks(0), 4u);
  EXPECT_EQ(load.PendingGuards(), 1u);
}

TEST(LoadStateTest, ReleaseAfterTargetRemovedIsANoOpEvenWhenIdReused) {
  LoadState load;
  auto old_guard = load.AddActive(2, kPrefix);
  load.RemoveTarget(2);
  EXPECT_EQ(load.ActiveBlocks(2), 0u);
  // The id comes back for a new target that has its own in-flight request.
  auto fresh = load.AddActive(2, kPrefix);
  old_guard.Release();
  EXPECT_EQ(load.ActiveBlocks(2), 4u);  // the new target's blocks are untouched
  fresh.Release();
  EXPECT_EQ(load.ActiveBlocks(2), 0u);
  EXPECT_EQ(load.PendingGuards(), 0u);
}

TEST(LoadStateTest, RecentBlocksDecayAndCharge) {
  LoadState load(0.5);
  load.ChargeRecent(1, 8);
  EXPECT_DOUBLE_EQ(load.RecentBlocks(1), 8);
  load.DecayRecent();
  EXPECT_DOUBLE_EQ(load.RecentBlocks(1), 4);
  load.ChargeRecent(1, 2);
  load.ChargeRecent(0, 1);
  load.DecayRecent();
  EXPECT_DOUBLE_EQ(load.RecentBlocks(1), 3);
  EXPECT_DOUBLE_EQ(load.RecentBlocks(0), 0.5);
  auto g = load.AddActive(1, kPrefix);
  EXPECT_DOUBLE_EQ(load.Load(1), 7);
  // Many decays keep values finite and correct (the lazy scale renormalises).
  for (int i = 0; i < 2000; ++i) load.DecayRecent();
  EXPECT_EQ(load.RecentBlocks(1), 0);
  load.ChargeRecent(1, 5);
  EXPECT_DOUBLE_EQ(load.RecentBlocks(1), 5);
}

TEST(LoadStateTest, DecayZeroTurnsRecentOff) {
  LoadState load(0.0);
  load.ChargeRecent(0, 10);
  load.DecayRecent();
  EXPECT_EQ(load.RecentBlocks(0), 0);
}

TEST(LoadStateTest, RemoveTargetDropsRecentToo) {
  LoadState load(0.97);
  load.ChargeRecent(4, 10);
  load.RemoveTarget(4);
  EXPECT_EQ(load.RecentBlocks(4), 0);
}

}  // namespace
}  // namespace infera::core
