#include "core/admission_queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace infera::core {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

std::vector<uint64_t> Drain(AdmissionQueue& q, int64_t now) {
  std::vector<uint64_t> out;
  while (std::optional<uint64_t> id = q.PopNext(now)) out.push_back(*id);
  return out;
}

TEST(AdmissionQueueTest, BindsNowUnlessItMustWaitOrOthersWait) {
  AdmissionQueue q;
  EXPECT_EQ(q.Offer(1, "a", 0, 0, /*must_wait=*/false), Admission::kBindNow);
  EXPECT_EQ(q.Offer(2, "a", 0, 0, /*must_wait=*/true), Admission::kQueued);
  // Nothing to wait for, but request 2 waits: no overtaking.
  EXPECT_EQ(q.Offer(3, "a", 0, 1, /*must_wait=*/false), Admission::kQueued);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(Drain(q, 5), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(q.stats().bound_now, 1u);
  EXPECT_EQ(q.stats().queued, 2u);
  EXPECT_EQ(q.stats().released, 2u);
  EXPECT_EQ(q.stats().total_wait_ns, 5 + 4);
  EXPECT_EQ(q.stats().max_wait_ns, 5);
  EXPECT_TRUE(q.empty());
}

TEST(AdmissionQueueTest, BoundRejectsWithRetryAfterTheOldestWait) {
  AdmissionQueue q({.max_queued = 2, .max_wait_ns = 0});
  EXPECT_EQ(q.Offer(1, "a", 0, 0, true), Admission::kQueued);
  EXPECT_EQ(q.Offer(2, "a", 0, kSecond, true), Admission::kQueued);
  EXPECT_EQ(q.Offer(3, "a", 0, 2 * kSecond + 1, true), Admission::kRejected);
  EXPECT_EQ(q.stats().rejected_full, 1u);
  // The oldest waited 2 s + 1 ns: retry after 3 s.
  EXPECT_EQ(q.RetryAfterSeconds(2 * kSecond + 1), 3);
  EXPECT_EQ(Drain(q, 3 * kSecond).size(), 2u);
  EXPECT_EQ(q.RetryAfterSeconds(3 * kSecond), 1);  // empty: at least 1
}

TEST(AdmissionQueueTest, HigherPriorityFirstThenTenantsTakeTurns) {
  AdmissionQueue q;
  // Tenant a floods first; b and c arrive later; one urgent request last.
  uint64_t id = 1;
  for (int i = 0; i < 4; ++i) q.Offer(id++, "a", 0, 0, true);  // 1..4
  q.Offer(id++, "b", 0, 1, true);                              // 5
  q.Offer(id++, "c", 0, 2, true);                              // 6
  q.Offer(id++, "b", 0, 3, true);                              // 7
  q.Offer(id++, "z", 5, 4, true);                              // 8: priority 5
  EXPECT_EQ(q.TenantsWaiting(), 4u);
  EXPECT_EQ(Drain(q, 10), (std::vector<uint64_t>{8, 1, 5, 6, 2, 7, 3, 4}));
}

TEST(AdmissionQueueTest, CancelReleasesTheEntryWithoutUsingATurn) {
  AdmissionQueue q;
  q.Offer(1, "a", 0, 0, true);
  q.Offer(2, "b", 0, 0, true);
  q.Offer(3, "a", 0, 0, true);
  EXPECT_TRUE(q.Cancel(1));
  EXPECT_FALSE(q.Cancel(1));   // already gone
  EXPECT_FALSE(q.Cancel(42));  // never queued
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.stats().cancelled, 1u);
  // a's turn is still first: its next request, then b.
  EXPECT_EQ(Drain(q, 1), (std::vector<uint64_t>{3, 2}));
  // Cancelling the last request of the last tenant leaves an empty queue that binds.
  q.Offer(4, "c", 0, 0, true);
  EXPECT_TRUE(q.Cancel(4));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.TenantsWaiting(), 0u);
  EXPECT_EQ(q.Offer(5, "c", 0, 0, false), Admission::kBindNow);
}

TEST(AdmissionQueueTest, ExpireDropsTheLongWaitersOldestFirst) {
  AdmissionQueue q({.max_queued = 16, .max_wait_ns = 10 * kSecond});
  q.Offer(1, "a", 0, 0, true);
  q.Offer(2, "b", 0, 3 * kSecond, true);
  q.Offer(3, "a", 0, 6 * kSecond, true);
  EXPECT_TRUE(q.Expire(9 * kSecond).empty());
  EXPECT_EQ(q.PopNext(9 * kSecond), std::optional<uint64_t>(1));
  EXPECT_EQ(q.Expire(14 * kSecond), (std::vector<uint64_t>{2}));
  EXPECT_EQ(q.Expire(16 * kSecond), (std::vector<uint64_t>{3}));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.stats().expired, 2u);
  EXPECT_EQ(q.stats().cancelled, 0u);
  EXPECT_EQ(AdmissionName(Admission::kRejected), std::string("rejected"));
}

}  // namespace
}  // namespace infera::core
