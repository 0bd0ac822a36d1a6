// Data-parallel ranks, the pure parts (doc/data-parallel.md): target names, the
// endpoint of each rank, the pinning of a leg (header and SGLang's body field) and a
// client's rank header.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/types.h"
#include "router/request/api_request.h"
#include "router/plan/fleet.h"
#include "router/dispatch/leg_request.h"
#include "router/request/request_context.h"
#include "router/plan/worker_set.h"

namespace infera::router {
namespace {

using nlohmann::json;

std::shared_ptr<const FleetWorker> Worker(uint32_t dp_rank, uint32_t dp_size,
                                          const std::string& engine = "vllm") {
  discovery::WorkerRecord r;
  r.worker_id = "10.0.0.5:30000";
  r.url = "http://10.0.0.5:30000";
  r.engine = engine;
  r.dp_rank = dp_rank;
  r.dp_size = dp_size;
  auto w = std::make_shared<FleetWorker>(r, *http::ParseHttpUrl(r.url));
  for (uint32_t i = 0; i < dp_size; ++i) w->targets.push_back(7 + i);
  return w;
}

TEST(DataParallelNames, EveryRankOfADataParallelWorkerIsNamedWithItsRank) {
  EXPECT_EQ(core::TargetName({"w:1", 0}, 2), "w:1#dp0");
  EXPECT_EQ(core::TargetName({"w:1", 1}, 2), "w:1#dp1");
  EXPECT_EQ(core::TargetName({"w:1", 0}, 1), "w:1");
  EXPECT_EQ(core::TargetName({"w:1", 3}, 1), "w:1#dp3");  // a record of rank 3 alone
  EXPECT_EQ(core::TargetKey({"w:1", 0}).ToString(), "w:1");
  EXPECT_EQ(core::TargetKey({"w:1", 5}).ToString(), "w:1#dp5");
  auto w = Worker(2, 2);
  EXPECT_EQ(w->TargetName(0), "10.0.0.5:30000#dp2");
  EXPECT_EQ(w->TargetName(1), "10.0.0.5:30000#dp3");
  EXPECT_EQ(Worker(0, 1)->TargetName(0), "10.0.0.5:30000");
}

TEST(DataParallelPorts, RankRListensOnTheRecordsPortPlusR) {
  EXPECT_EQ(WorkerSet::RankEndpoint("tcp://10.0.0.5:5557", 0), "tcp://10.0.0.5:5557");
  EXPECT_EQ(WorkerSet::RankEndpoint("tcp://10.0.0.5:5557", 1), "tcp://10.0.0.5:5558");
  EXPECT_EQ(WorkerSet::RankEndpoint("tcp://10.0.0.5:5557", 7), "tcp://10.0.0.5:5564");
  EXPECT_EQ(WorkerSet::RankEndpoint("ipc:///run/kv", 2), "ipc:///run/kv_dp2");  // vLLM's
  EXPECT_EQ(WorkerSet::RankEndpoint("", 3), "");  // no events: none for any rank
}

RequestContext Context(const std::string& body) {
  RequestContext ctx;
  ctx.request_id = "r1";
  ctx.upstream_path = "/v1/chat/completions";
  ctx.upstream_body = body;
  auto parsed = ParseApiRequest(ApiKind::kChat, body);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (parsed.ok()) ctx.api = *std::move(parsed);
  return ctx;
}

PickLeg Leg(std::shared_ptr<const FleetWorker> w, size_t rank_index) {
  PickLeg leg;
  leg.worker = w;
  leg.target = w->targets[rank_index];
  leg.dp_rank = w->DpRankOf(leg.target);
  return leg;
}

constexpr char kChat[] = R"({"model":"m","messages":[{"role":"user","content":"x"}]})";

TEST(DataParallelPinning, AVllmRankGetsTheHeaderAndAnUntouchedBody) {
  RequestContext ctx = Context(kChat);
  UpstreamRequest up = LegRequest(ctx, Leg(Worker(0, 2), 1));
  EXPECT_EQ(up.headers.Get("X-Data-Parallel-Rank"), "1");
  EXPECT_EQ(up.body, kChat);
}

TEST(DataParallelPinning, AnSglangRankGetsTheHeaderAndTheBodyField) {
  RequestContext ctx = Context(kChat);
  UpstreamRequest up = LegRequest(ctx, Leg(Worker(4, 2, "sglang"), 1));
  EXPECT_EQ(up.headers.Get("X-Data-Parallel-Rank"), "5");
  EXPECT_EQ(json::parse(up.body)["data_parallel_rank"], 5);
  EXPECT_EQ(json::parse(up.body)["messages"][0]["content"], "x");
}

TEST(DataParallelPinning, AOneRankWorkerGetsNoRank) {
  RequestContext ctx = Context(kChat);
  UpstreamRequest up = LegRequest(ctx, Leg(Worker(0, 1, "sglang"), 0));
  EXPECT_EQ(up.headers.Get("X-Data-Parallel-Rank"), "");
  EXPECT_EQ(up.body, kChat);
}

TEST(DataParallelPinning, AClientsRankNeverReachesAWorker) {
  const std::string body =
      R"({"model":"m","data_parallel_rank":3,"routed_dp_rank":1,"messages":[{"role":"user","content":"x"}]})";
  RequestContext ctx = Context(body);
  EXPECT_TRUE(ctx.api.client_dp_rank);
  json vllm = json::parse(LegRequest(ctx, Leg(Worker(0, 2), 0)).body);
  EXPECT_FALSE(vllm.contains("data_parallel_rank")) << vllm.dump();
  EXPECT_FALSE(vllm.contains("routed_dp_rank")) << vllm.dump();
  json sglang = json::parse(LegRequest(ctx, Leg(Worker(0, 2, "sglang"), 0)).body);
  EXPECT_EQ(sglang["data_parallel_rank"], 0);
  EXPECT_FALSE(sglang.contains("routed_dp_rank")) << sglang.dump();
  json one = json::parse(LegRequest(ctx, Leg(Worker(0, 1), 0)).body);
  EXPECT_FALSE(one.contains("data_parallel_rank")) << one.dump();
}

// The PD legs edit one parse of the body (EditLegJson): the same result as LegRequest's
// parse, edit and serialise, for every kind of leg.
TEST(DataParallelPinning, EditingTheParsedBodyMatchesLegRequest) {
  const std::string body =
      R"({"model":"m","data_parallel_rank":3,"routed_dp_rank":1,"messages":[{"role":"user","content":"x"}]})";
  for (const std::string& b : {std::string(kChat), body}) {
    RequestContext ctx = Context(b);
    for (const PickLeg& leg : {Leg(Worker(0, 2), 1), Leg(Worker(4, 2, "sglang"), 1),
                               Leg(Worker(0, 1, "sglang"), 0), Leg(Worker(0, 1), 0)}) {
      json edited = json::parse(b);
      EditLegJson(edited, ctx, leg);
      EXPECT_EQ(edited, json::parse(LegRequest(ctx, leg).body)) << b;
      UpstreamRequest head = LegHead(ctx, leg);
      EXPECT_TRUE(head.body.empty());
      EXPECT_EQ(head.headers.Get("X-Data-Parallel-Rank"),
                LegRequest(ctx, leg).headers.Get("X-Data-Parallel-Rank"));
    }
  }
}

TEST(DataParallelPinning, AClientsRankMustBeARankNumber) {
  EXPECT_TRUE(CheckClientDpRankHeader("").ok());
  EXPECT_TRUE(CheckClientDpRankHeader("0").ok());
  EXPECT_TRUE(CheckClientDpRankHeader("4294967295").ok());
  for (const char* bad : {"-1", "1x", " 1", "+1", "4294967296", "99999999999", "abc"}) {
    absl::Status s = CheckClientDpRankHeader(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message(), "X-Data-Parallel-Rank must be a non-negative integer") << bad;
  }
  for (const char* bad : {R"("1")", "-1", "1.5", "4294967296", "[0]"}) {
    auto r = ParseApiRequest(
        ApiKind::kChat,
        std::string(
            R"({"model":"m","messages":[{"role":"user","content":"x"}],"data_parallel_rank":)") +
            bad + "}");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(), "'data_parallel_rank' must be a non-negative integer");
  }
  EXPECT_TRUE(
      ParseApiRequest(
          ApiKind::kChat,
          R"({"model":"m","messages":[{"role":"user","content":"x"}],"data_parallel_rank":null})")
          .ok());
  EXPECT_FALSE(
      ParseApiRequest(
          ApiKind::kChat,
          R"({"model":"m","messages":[{"role":"user","content":"x"}],"routed_dp_rank":-2})")
          .ok());
}

}  // namespace
}  // namespace infera::router
