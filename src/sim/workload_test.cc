#include "sim/workload.h"

#include <gtest/gtest.h>

#include <set>

namespace infera::sim {
namespace {

TEST(WorkloadTest, MooncakeEqualHashIdsGiveEqualTokens) {
  const std::string trace =
      "{\"timestamp\": 0, \"input_length\": 1030, \"output_length\": 7, \"hash_ids\": [4, 5, 6]}\n"
      "\n"
      "{\"timestamp\": 1500, \"input_length\": 700, \"output_length\": 0, \"hash_ids\": [4, 9]}\n";
  absl::StatusOr<Workload> w = ParseMooncakeTrace(trace, {});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->requests.size(), 2u);
  EXPECT_EQ(w->requests[0].prompt_tokens, 1030u);
  EXPECT_EQ(w->requests[0].segments.back().length, 6u);  // ends mid-block
  EXPECT_EQ(w->requests[0].output_tokens, 7u);
  EXPECT_EQ(w->requests[1].output_tokens, 1u);  // at least one token
  EXPECT_EQ(w->requests[1].arrival_ns, 1'500'000'000);
  std::vector<core::TokenId> a, b;
  w->Materialize(w->requests[0], a);
  w->Materialize(w->requests[1], b);
  ASSERT_EQ(a.size(), 1030u);
  ASSERT_EQ(b.size(), 700u);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 512, b.begin()));
  EXPECT_NE(a[512], b[512]);
  EXPECT_EQ(std::set<core::TokenId>(a.begin(), a.end()).count(0), 0u);
}

TEST(WorkloadTest, MooncakeOptionsScaleLimitAndOffset) {
  std::string trace;
  for (int i = 0; i < 5; ++i) {
    trace += "{\"timestamp\": " + std::to_string(1000 + i * 100) +
             ", \"input_length\": 10, \"output_length\": 900, \"hash_ids\": [" + std::to_string(i) +
             "]}\n";
  }
  MooncakeOptions o;
  o.offset = 1;
  o.limit = 3;
  o.time_scale = 0.5;
  o.max_output_tokens = 100;
  absl::StatusOr<Workload> w = ParseMooncakeTrace(trace, o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->requests.size(), 3u);
  EXPECT_EQ(w->requests[0].arrival_ns, 0);
  EXPECT_EQ(w->requests[2].arrival_ns, 100'000'000);  // 200 ms × 0.5
  EXPECT_EQ(w->requests[0].output_tokens, 100u);
}

TEST(WorkloadTest, MooncakeRejectsBadLinesWithTheLineNumber) {
  const char* bad[] = {
      "not json",
      "[1,2]",
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}",
      "{\"timestamp\": 0, \"input_length\": -4, \"output_length\": 1, \"hash_ids\": [1]}",
      "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1]}",
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [\"x\"]}",
      "{\"timestamp\": \"a\", \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}",
  };
  for (const char* line : bad) {
    std::string trace = std::string(
                            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                            "\"hash_ids\": [1]}\n") +
                        line + "\n";
    absl::StatusOr<Workload> w = ParseMooncakeTrace(trace, {});
    ASSERT_FALSE(w.ok()) << line;
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find("line 2"), std::string_view::npos) << w.status();
  }
}

TEST(WorkloadTest, SharedPrefixGroupsShareTheSystemPrompt) {
  SharedPrefixOptions o;
  o.groups = 2;
  o.prompts_per_group = 3;
  o.system_tokens = 64;
  o.question_tokens = 8;
  o.request_rate = 2;
  Workload w = SharedPrefixWorkload(o);
  ASSERT_EQ(w.requests.size(), 6u);
  EXPECT_EQ(w.requests[1].arrival_ns, 500'000'000);
  std::vector<core::TokenId> r0, r1, r2;
  w.Materialize(w.requests[0], r0);  // group 0
  w.Materialize(w.requests[1], r1);  // group 1
  w.Materialize(w.requests[2], r2);  // group 0
  EXPECT_EQ(r0.size(), 72u);
  EXPECT_TRUE(std::equal(r0.begin(), r0.begin() + 64, r2.begin()));
  EXPECT_FALSE(std::equal(r0.begin() + 64, r0.end(), r2.begin() + 64));
  EXPECT_FALSE(std::equal(r0.begin(), r0.begin() + 64, r1.begin()));
}

TEST(WorkloadTest, MultiTurnHistoryGrows) {
  MultiTurnOptions o;
  o.sessions = 2;
  o.turns = 3;
  o.system_tokens = 10;
  o.user_tokens = 5;
  o.output_tokens = 4;
  Workload w = MultiTurnWorkload(o);
  ASSERT_EQ(w.requests.size(), 6u);
  // Session 1's turns are requests 0, 2, 4.
  std::vector<core::TokenId> t0, t1, t2;
  w.Materialize(w.requests[0], t0);
  w.Materialize(w.requests[2], t1);
  w.Materialize(w.requests[4], t2);
  EXPECT_EQ(t0.size(), 15u);
  EXPECT_EQ(t1.size(), 24u);
  EXPECT_EQ(t2.size(), 33u);
  EXPECT_TRUE(std::equal(t0.begin(), t0.end(), t1.begin()));
  EXPECT_TRUE(std::equal(t1.begin(), t1.end(), t2.begin()));
  EXPECT_EQ(w.requests[2].session, 1u);
}

TEST(WorkloadTest, ImagesRepeatFromAPool) {
  Workload w = SharedPrefixWorkload({});
  AttachImages(w, 2, 3, 9);
  std::set<uint64_t> keys;
  for (const WorkloadRequest& r : w.requests) {
    ASSERT_EQ(r.image_keys.size(), 2u);
    keys.insert(r.image_keys.begin(), r.image_keys.end());
  }
  EXPECT_LE(keys.size(), 3u);
}

}  // namespace
}  // namespace infera::sim
