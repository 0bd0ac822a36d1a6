#include "bench_report.h"

#include <gtest/gtest.h>

namespace infera::bench {
namespace {

TEST(BenchReportTest, Percentiles) {
  EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0);
  EXPECT_DOUBLE_EQ(Percentile({3, 1, 2}, 0.5), 2);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 1.0), 4);
  Latency l = Summarize({10, 20, 30});
  EXPECT_DOUBLE_EQ(l.mean, 20);
  EXPECT_DOUBLE_EQ(l.p50, 20);
  EXPECT_NEAR(l.p99, 29.8, 1e-9);
}

TEST(BenchReportTest, SummarizeRunComputesHitRateSharesAndSpread) {
  std::vector<RequestRecord> recs(3);
  recs[0] = {0, 10'000'000, 20'000'000, 100, 50, 10, 0, false, {}};
  recs[1] = {0, 30'000'000, 1'000'000'000, 100, 0, 10, 1, false, {}};
  recs[2] = {0, -1, -1, 100, 0, 0, 1, true, {}};
  PolicySummary s = SummarizeRun("kv-aware", 2, recs, 2, 0.5, 1.0);
  EXPECT_EQ(s.completed, 2u);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_DOUBLE_EQ(s.hit_rate, 0.25);
  EXPECT_DOUBLE_EQ(s.bound_share, 0.5);
  EXPECT_DOUBLE_EQ(s.infinite_share, 0.25);
  EXPECT_DOUBLE_EQ(s.ttft_ms.mean, 20);
  EXPECT_DOUBLE_EQ(s.output_tok_s, 20.0);
  EXPECT_EQ(s.requests_per_worker, (std::vector<uint64_t>{1, 2}));
  // prompt tokens per worker 100 vs 200: mean 150, stddev 50.
  EXPECT_NEAR(s.load_spread, 1.0 / 3, 1e-12);
}

TEST(BenchReportTest, JsonHasTheIssueSchema) {
  Report r;
  r.mode = "offline";
  r.bound_hit_rate = 0.3;
  r.infinite_hit_rate = 0.374;
  std::vector<RequestRecord> recs(1);
  recs[0] = {0, 1'000'000, 2'000'000, 10, 5, 1, 0, false, {}};
  r.results.push_back(SummarizeRun("round-robin", 0, recs, 1, 0.3, 0.374));
  nlohmann::json j = ReportJson(r);
  EXPECT_DOUBLE_EQ(j["bound_hit_rate"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(j["infinite_hit_rate"].get<double>(), 0.374);
  const nlohmann::json& x = j["results"][0];
  EXPECT_EQ(x["policy"], "round-robin");
  for (const char* k : {"overlap_weight", "hit_rate", "output_tok_s", "load_spread"}) {
    EXPECT_TRUE(x[k].is_number()) << k;
  }
  for (const char* k : {"ttft_ms", "e2e_ms"}) {
    for (const char* q : {"mean", "p50", "p99"}) EXPECT_TRUE(x[k][q].is_number()) << k << q;
  }
  EXPECT_DOUBLE_EQ(x["hit_rate"].get<double>(), 0.5);
  std::string table = FormatTable(r);
  EXPECT_NE(table.find("round-robin"), std::string::npos);
  EXPECT_NE(TtftCdfSvg(r).find("<svg"), std::string::npos);
  EXPECT_NE(LoadSvg(r).find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace infera::bench

#include "workload_flags.h"

namespace infera::bench {
namespace {

TEST(PolicySpecTest, PerRoleWeights) {
  auto specs = ParsePolicySpecs("kv-aware:20/2,kv-aware:16,round-robin");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_DOUBLE_EQ((*specs)[0].overlap_weight, 20);
  ASSERT_TRUE((*specs)[0].decode_overlap_weight.has_value());
  EXPECT_DOUBLE_EQ(*(*specs)[0].decode_overlap_weight, 2);
  EXPECT_DOUBLE_EQ((*specs)[1].overlap_weight, 16);
  EXPECT_FALSE((*specs)[1].decode_overlap_weight.has_value());
  EXPECT_FALSE(ParsePolicySpecs("kv-aware:20/").ok());
  EXPECT_FALSE(ParsePolicySpecs("kv-aware:/2").ok());
  EXPECT_FALSE(ParsePolicySpecs("kv-aware:20/-1").ok());
}

TEST(BenchReportTest, ExtraFieldsLandInTheJsonResult) {
  Report r;
  r.mode = "offline";
  r.results.resize(1);
  r.results[0].policy = "kv-aware:20/2";
  r.results[0].extra = {{"pd", {{"decode_only", 3}}}};
  const nlohmann::json j = ReportJson(r);
  EXPECT_EQ(j["results"][0]["pd"]["decode_only"], 3);
  EXPECT_EQ(j["results"][0]["policy"], "kv-aware:20/2");
}

}  // namespace
}  // namespace infera::bench
