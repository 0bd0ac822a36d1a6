#include "router/plan/admission_gate.h"

#include <gtest/gtest.h>

#include <vector>

namespace infera::router {
namespace {

using core::Admission;

constexpr int64_t kSecond = 1'000'000'000;

TEST(AdmissionGateTest, OneQueuePerPoolAndSerialBindingByTheLoadOfNow) {
  AdmissionGate gate({.max_queued = 8, .max_wait_ns = 30 * kSecond});
  EXPECT_EQ(gate.Offer("m/mixed", 1, "", 0, 0, /*must_wait=*/false), Admission::kBindNow);
  EXPECT_EQ(gate.Offer("m/mixed", 2, "", 0, 0, true), Admission::kQueued);
  EXPECT_EQ(gate.Offer("m/mixed", 3, "", 0, 0, true), Admission::kQueued);
  // Another pool is not held behind the first one's waiters.
  EXPECT_EQ(gate.Offer("m/prefill", 4, "", 0, 0, false), Admission::kBindNow);
  EXPECT_EQ(gate.Depth("m/mixed"), 2u);
  EXPECT_EQ(gate.Depth("m/prefill"), 0u);
  EXPECT_EQ(gate.KeysWaiting(), std::vector<std::string>{"m/mixed"});

  // The caller's load check runs before each release: one worker frees, one binds.
  int free_slots = 1;
  const auto bound = gate.Drain("m/mixed", kSecond, [&] { return free_slots-- <= 0; });
  EXPECT_EQ(bound, std::vector<uint64_t>{2});
  EXPECT_EQ(gate.Depth("m/mixed"), 1u);
  EXPECT_EQ(gate.Drain("m/mixed", kSecond, [] { return false; }), std::vector<uint64_t>{3});
  EXPECT_EQ(gate.Depth("m/mixed"), 0u);
  EXPECT_TRUE(gate.Drain("unknown", kSecond, [] { return false; }).empty());
}

TEST(AdmissionGateTest, PriorityFirstThenTenantTurns) {
  AdmissionGate gate({.max_queued = 8, .max_wait_ns = 0});
  gate.Offer("k", 1, "a", 0, 0, true);
  gate.Offer("k", 2, "a", 0, 1, true);
  gate.Offer("k", 3, "b", 0, 2, true);
  gate.Offer("k", 4, "c", 5, 3, true);
  EXPECT_EQ(gate.Drain("k", 10, [] { return false; }), (std::vector<uint64_t>{4, 1, 3, 2}));
}

TEST(AdmissionGateTest, BoundCancelAndExpire) {
  AdmissionGate gate({.max_queued = 2, .max_wait_ns = 5 * kSecond});
  EXPECT_EQ(gate.Offer("k", 1, "", 0, 0, true), Admission::kQueued);
  EXPECT_EQ(gate.Offer("k", 2, "", 0, 2 * kSecond, true), Admission::kQueued);
  EXPECT_EQ(gate.Offer("k", 3, "", 0, 2 * kSecond, false), Admission::kRejected);
  // The oldest has waited 2.5 s: a rejected client retries in 3.
  EXPECT_EQ(gate.RetryAfterSeconds("k", 2 * kSecond + kSecond / 2), 3);
  EXPECT_EQ(gate.RetryAfterSeconds("other", 0), 1);

  EXPECT_TRUE(gate.Cancel("k", 2));
  EXPECT_FALSE(gate.Cancel("k", 2));
  EXPECT_FALSE(gate.Cancel("other", 1));
  EXPECT_EQ(gate.Depth("k"), 1u);

  EXPECT_TRUE(gate.Expire(5 * kSecond - 1).empty());
  const auto dropped = gate.Expire(5 * kSecond);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], (std::pair<std::string, uint64_t>{"k", 1}));
  EXPECT_EQ(gate.Depths(), (std::vector<std::pair<std::string, size_t>>{{"k", 0}}));
}

}  // namespace
}  // namespace infera::router
