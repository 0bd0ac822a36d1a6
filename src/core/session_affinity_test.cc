#include "core/session_affinity.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <string>
#include <vector>

namespace infera::core {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

SessionConfig Config(SessionMode mode, size_t max_sessions = 100, int64_t ttl_s = 60) {
  return {.mode = mode, .max_sessions = max_sessions, .ttl_ns = ttl_s * kSecond};
}

TEST(SessionModeTest, ParsesTheFlagValues) {
  EXPECT_EQ(*ParseSessionMode("off"), SessionMode::kOff);
  EXPECT_EQ(*ParseSessionMode("prefill"), SessionMode::kPrefill);
  EXPECT_EQ(*ParseSessionMode("both"), SessionMode::kBoth);
  auto bad = ParseSessionMode("decode");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("off, prefill or both"), std::string::npos);
  EXPECT_STREQ(SessionModeName(SessionMode::kBoth), "both");
}

TEST(SessionConfigTest, DefaultIsOffAndBounded) {
  SessionConfig config;
  EXPECT_EQ(config.mode, SessionMode::kOff);
  EXPECT_TRUE(config.Validate().ok());
  EXPECT_FALSE((SessionConfig{.max_sessions = 0}).Validate().ok());
  EXPECT_FALSE((SessionConfig{.ttl_ns = 0}).Validate().ok());
}

TEST(SessionKeyTest, IsScopedByModel) {
  const std::string joined = std::string("m") + '\0' + "s1";
  EXPECT_EQ(SessionKey("m", "s1"), XXH3_64bits_withSeed(joined.data(), joined.size(), 0));
  EXPECT_NE(SessionKey("m", "s1"), SessionKey("n", "s1"));
  EXPECT_NE(SessionKey("m", "s1"), SessionKey("m", "s2"));
  // The separator keeps ("ab", "c") and ("a", "bc") apart.
  EXPECT_NE(SessionKey("ab", "c"), SessionKey("a", "bc"));
}

TEST(SessionAffinityTest, SlotsEnabledByMode) {
  EXPECT_FALSE(SessionAffinity(Config(SessionMode::kOff)).Enabled(SessionSlot::kPrefill));
  EXPECT_FALSE(SessionAffinity(Config(SessionMode::kOff)).Enabled(SessionSlot::kDecode));
  EXPECT_TRUE(SessionAffinity(Config(SessionMode::kPrefill)).Enabled(SessionSlot::kPrefill));
  EXPECT_FALSE(SessionAffinity(Config(SessionMode::kPrefill)).Enabled(SessionSlot::kDecode));
  EXPECT_TRUE(SessionAffinity(Config(SessionMode::kBoth)).Enabled(SessionSlot::kPrefill));
  EXPECT_TRUE(SessionAffinity(Config(SessionMode::kBoth)).Enabled(SessionSlot::kDecode));
}

TEST(SessionAffinityTest, FirstPickBindsThenNarrowsToTheBoundTarget) {
  SessionAffinity table(Config(SessionMode::kPrefill));
  std::vector<TargetId> candidates = {3, 5, 7};
  EXPECT_FALSE(table.Narrow(42, SessionSlot::kPrefill, 0, candidates));
  EXPECT_EQ(candidates, (std::vector<TargetId>{3, 5, 7}));  // unbound: untouched
  EXPECT_EQ(table.Bind(42, SessionSlot::kPrefill, 5, 0), SessionOutcome::kNew);

  EXPECT_TRUE(table.Narrow(42, SessionSlot::kPrefill, kSecond, candidates));
  EXPECT_EQ(candidates, (std::vector<TargetId>{5}));
  EXPECT_EQ(table.Bind(42, SessionSlot::kPrefill, 5, kSecond), SessionOutcome::kHit);
  // Another session is independent.
  candidates = {3, 5, 7};
  EXPECT_FALSE(table.Narrow(43, SessionSlot::kPrefill, kSecond, candidates));
  const SessionStats stats = table.Stats();
  EXPECT_EQ(stats.sessions, 1u);
  EXPECT_EQ(stats.binds[0], 1u);
  EXPECT_EQ(stats.hits[0], 1u);
  EXPECT_EQ(stats.rebinds[0], 0u);
}

TEST(SessionAffinityTest, SlotsBindIndependently) {
  SessionAffinity table(Config(SessionMode::kBoth));
  EXPECT_EQ(table.Bind(1, SessionSlot::kPrefill, 2, 0), SessionOutcome::kNew);
  EXPECT_EQ(table.Bound(1, SessionSlot::kDecode, 0), std::nullopt);
  EXPECT_EQ(table.Bind(1, SessionSlot::kDecode, 9, 0), SessionOutcome::kNew);
  EXPECT_EQ(table.Bound(1, SessionSlot::kPrefill, 0), TargetId{2});
  EXPECT_EQ(table.Bound(1, SessionSlot::kDecode, 0), TargetId{9});
  EXPECT_EQ(table.Size(), 1u);
  EXPECT_EQ(table.Stats().binds[1], 1u);
}

TEST(SessionAffinityTest, AbsentBoundTargetIsReplacedAndRebound) {
  // The bound target is not among the candidates (breaker open, already tried, or
  // not serving the model): the pick runs over all of them and rebinds.
  SessionAffinity table(Config(SessionMode::kPrefill));
  table.Bind(7, SessionSlot::kPrefill, 1, 0);
  std::vector<TargetId> candidates = {2, 3};
  EXPECT_FALSE(table.Narrow(7, SessionSlot::kPrefill, 0, candidates));
  EXPECT_EQ(candidates, (std::vector<TargetId>{2, 3}));
  EXPECT_EQ(table.Bind(7, SessionSlot::kPrefill, 3, 0), SessionOutcome::kRebound);
  candidates = {1, 2, 3};  // the old target is back: the new binding holds
  EXPECT_TRUE(table.Narrow(7, SessionSlot::kPrefill, 0, candidates));
  EXPECT_EQ(candidates, (std::vector<TargetId>{3}));
  EXPECT_EQ(table.Stats().rebinds[0], 1u);
}

TEST(SessionAffinityTest, RemovedTargetIsNeverInheritedByItsReusedId) {
  SessionAffinity table(Config(SessionMode::kPrefill));
  table.Bind(7, SessionSlot::kPrefill, 4, 0);
  table.RemoveTarget(4);  // the worker left; id 4 may go to a new worker
  EXPECT_EQ(table.Bound(7, SessionSlot::kPrefill, 0), std::nullopt);
  std::vector<TargetId> candidates = {4, 5};
  EXPECT_FALSE(table.Narrow(7, SessionSlot::kPrefill, 0, candidates));
  // Even when the pick lands on the reused id, it is a replacement.
  EXPECT_EQ(table.Bind(7, SessionSlot::kPrefill, 4, 0), SessionOutcome::kRebound);
  EXPECT_EQ(table.Bound(7, SessionSlot::kPrefill, 0), TargetId{4});
  EXPECT_EQ(table.Bind(7, SessionSlot::kPrefill, 4, 0), SessionOutcome::kHit);
  // Removing another target leaves the binding alone.
  table.RemoveTarget(9);
  EXPECT_EQ(table.Bound(7, SessionSlot::kPrefill, 0), TargetId{4});
}

TEST(SessionAffinityTest, UnusedSessionsExpireAfterTheTtl) {
  SessionAffinity table(Config(SessionMode::kPrefill, 100, /*ttl_s=*/10));
  table.Bind(1, SessionSlot::kPrefill, 1, 0);
  table.Bind(2, SessionSlot::kPrefill, 2, 5 * kSecond);
  // Used at 9 s: session 1 lives until 19 s.
  EXPECT_EQ(table.Bind(1, SessionSlot::kPrefill, 1, 9 * kSecond), SessionOutcome::kHit);
  EXPECT_EQ(table.Bound(2, SessionSlot::kPrefill, 15 * kSecond - 1), TargetId{2});
  EXPECT_EQ(table.Bound(2, SessionSlot::kPrefill, 15 * kSecond), std::nullopt);  // expired
  EXPECT_EQ(table.Size(), 1u);
  EXPECT_EQ(table.Bound(1, SessionSlot::kPrefill, 18 * kSecond), TargetId{1});
  EXPECT_EQ(table.Bind(1, SessionSlot::kPrefill, 3, 19 * kSecond), SessionOutcome::kNew);
  const SessionStats stats = table.Stats();
  EXPECT_EQ(stats.expired, 2u);
  EXPECT_EQ(stats.evicted_lru, 0u);
  EXPECT_EQ(stats.sessions, 1u);
}

TEST(SessionAffinityTest, FullTableEvictsTheLeastRecentlyUsed) {
  SessionAffinity table(Config(SessionMode::kPrefill, /*max_sessions=*/3));
  for (uint64_t k = 1; k <= 3; ++k) table.Bind(k, SessionSlot::kPrefill, 0, k);
  table.Bind(1, SessionSlot::kPrefill, 0, 4);  // 1 is now the most recent; 2 the least
  EXPECT_EQ(table.Bind(4, SessionSlot::kPrefill, 0, 5), SessionOutcome::kNew);
  EXPECT_EQ(table.Size(), 3u);
  EXPECT_EQ(table.Bound(2, SessionSlot::kPrefill, 6), std::nullopt);
  EXPECT_TRUE(table.Bound(1, SessionSlot::kPrefill, 6).has_value());
  EXPECT_TRUE(table.Bound(3, SessionSlot::kPrefill, 6).has_value());
  EXPECT_TRUE(table.Bound(4, SessionSlot::kPrefill, 6).has_value());
  // Reading a binding does not refresh it: 3 goes next.
  table.Bind(5, SessionSlot::kPrefill, 0, 7);
  EXPECT_EQ(table.Bound(3, SessionSlot::kPrefill, 8), std::nullopt);
  EXPECT_EQ(table.Stats().evicted_lru, 2u);
}

TEST(SessionAffinityTest, TableStaysBoundedUnderManySessions) {
  SessionAffinity table(Config(SessionMode::kBoth, /*max_sessions=*/64));
  for (uint64_t k = 0; k < 10'000; ++k) {
    table.Bind(k, SessionSlot::kPrefill, static_cast<TargetId>(k % 4), static_cast<int64_t>(k));
    table.Bind(k, SessionSlot::kDecode, static_cast<TargetId>(k % 3), static_cast<int64_t>(k));
  }
  EXPECT_EQ(table.Size(), 64u);
  EXPECT_EQ(table.Stats().evicted_lru, 10'000u - 64u);
  EXPECT_EQ(table.Bound(9'999, SessionSlot::kDecode, 10'000), TargetId{9'999 % 3});
}

}  // namespace
}  // namespace infera::core
