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

TEST(BenchReportTest, MidFirstTokenRateCountsTheMiddleHalf) {
  EXPECT_DOUBLE_EQ(MidFirstTokenRate({}), 0);
  EXPECT_DOUBLE_EQ(MidFirstTokenRate({1, 2, 3}), 0);
  EXPECT_DOUBLE_EQ(MidFirstTokenRate({5, 5, 5, 5}), 0);  // no time between the quartiles
  // Eight first tokens, unsorted: an early one at 0, then one every 100 ms from 1 s, a
  // late one at 60 s. Quartiles: index 2 (1.1 s) and 6 (1.5 s): 4 requests in 0.4 s.
  std::vector<int64_t> t = {60'000'000'000, 0,           1'000'000'000, 1'100'000'000,
                            1'200'000'000,  1'300'000'000, 1'400'000'000, 1'500'000'000};
  EXPECT_DOUBLE_EQ(MidFirstTokenRate(t), 10.0);
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

TEST(BenchReportTest, GapClosedIsMeasuredFromRoundRobinToTheFloor) {
  Report r;
  r.has_floor = true;
  r.ttft_floor_ms = {100, 50, 400};
  PolicySummary rr, kv;
  rr.policy = "round-robin";
  rr.ttft_ms = {300, 150, 1400};
  kv.policy = "kv-aware";
  kv.ttft_ms = {150, 100, 900};
  r.results = {rr, kv};
  ComputeGapClosed(r);
  EXPECT_DOUBLE_EQ(r.results[0].gap_closed.mean, 0);
  EXPECT_DOUBLE_EQ(r.results[1].gap_closed.mean, 0.75);
  EXPECT_DOUBLE_EQ(r.results[1].gap_closed.p50, 0.5);
  EXPECT_DOUBLE_EQ(r.results[1].gap_closed.p99, 0.5);
  r.results[1].kv_util_fleet = {0.2, 0.6, 0.4};
  SummarizeKvUtil(r.results[1]);
  EXPECT_DOUBLE_EQ(r.results[1].kv_util_max, 0.6);
  EXPECT_NEAR(r.results[1].kv_util_mean, 0.4, 1e-12);
  r.results[1].has_goodput = true;
  r.results[1].goodput_rps = 3.5;
  r.slo_ttft_ms = 2000;
  const nlohmann::json j = ReportJson(r);
  EXPECT_DOUBLE_EQ(j["ttft_floor_ms"]["mean"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(j["results"][1]["gap_closed"]["mean"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["results"][1]["goodput"]["rps"].get<double>(), 3.5);
  EXPECT_FALSE(j["results"][0].contains("goodput"));
  EXPECT_NE(FormatTable(r).find("TTFT floor"), std::string::npos);
}

TEST(BenchReportTest, OnlineLoadSeriesComesFromTheRecords) {
  // Worker 0 serves [0, 4 s) and [1 s, 2 s); worker 1 [2 s, 3 s); one failed request
  // without a worker is ignored.
  std::vector<RequestRecord> recs(4);
  recs[0] = {0, 1, 4'000'000'000, 1, 0, 1, 0, false, {}};
  recs[1] = {1'000'000'000, 1, 2'000'000'000, 1, 0, 1, 0, false, {}};
  recs[2] = {2'000'000'000, 1, 3'000'000'000, 1, 0, 1, 1, false, {}};
  recs[3] = {0, -1, -1, 1, 0, 0, -1, true, {}};
  PolicySummary s;
  LoadFromRecords(recs, 2, 5, s);  // samples at 0, 1, 2, 3, 4 s
  ASSERT_EQ(s.load_times_s, (std::vector<double>{0, 1, 2, 3, 4}));
  ASSERT_EQ(s.load_per_worker.size(), 5u);
  EXPECT_EQ(s.load_per_worker[0], (std::vector<double>{1, 0}));
  EXPECT_EQ(s.load_per_worker[1], (std::vector<double>{2, 0}));
  EXPECT_EQ(s.load_per_worker[2], (std::vector<double>{1, 1}));
  EXPECT_EQ(s.load_per_worker[3], (std::vector<double>{1, 0}));
  EXPECT_EQ(s.load_per_worker[4], (std::vector<double>{0, 0}));
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
  // The TTFT oracle is a bound of the simulator's, not a core policy; it takes no weight.
  auto oracle = ParsePolicySpecs("ttft-oracle,round-robin");
  ASSERT_TRUE(oracle.ok()) << oracle.status();
  EXPECT_EQ((*oracle)[0].name, kTtftOracle);
  EXPECT_FALSE(ParsePolicySpecs("ttft-oracle:2").ok());
  EXPECT_FALSE(ParsePolicySpecs("ttft").ok());
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
