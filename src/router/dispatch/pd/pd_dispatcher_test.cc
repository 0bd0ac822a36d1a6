// The PD dispatcher in-process: the whole router (real server on port 0, real
// pipeline), a FakeUpstream playing the prefill and decode workers, a test clock and a
// fixed seed. For each protocol the legs' order and exact fields; every failure path's
// status and error shape; each test ends with every hold released (pending guards 0,
// active blocks 0 on every target).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "http/client.h"
#include "router/dispatch/fake_upstream.h"
#include "router/router.h"
#include "router/router_test_support.h"
#include "testing/wait_for.h"

namespace infera::router {
namespace {

using nlohmann::json;

const char kOk[] = R"({"choices":[{"index":0,"text":"ok"}]})";
const std::vector<std::string> kTargets = {"p:1", "p2:1", "d:1", "d2:1", "m:1"};

std::string Prompt64() {
  std::string prompt = "[";
  for (int i = 0; i < 64; ++i) prompt += (i ? "," : "") + std::to_string(i + 1);
  return prompt + "]";
}
std::string Completion(const std::string& extra = "") {
  return R"({"model":"m","prompt":)" + Prompt64() + extra + "}";
}
std::string SseText(const std::string& text) {
  return "data: " + json({{"choices", {{{"index", 0}, {"text", text}}}}}).dump() + "\n\n";
}

class PdDispatcherTest : public ::testing::Test {
 protected:
  void StartRouter(RouterOptions opt = {}) {
    router_ = testing::StartTestRouter(std::move(opt), clock_, 7, &fake_);  // kv-aware
    ASSERT_TRUE(router_);
  }
  // A worker "<host>:1" of `mode` speaking `protocol`.
  void AddWorker(const std::string& host, discovery::DisaggMode mode,
                 discovery::PdProtocol protocol) {
    router_->AddWorker(testing::PdWorkerRecord(host, mode, protocol));
  }
  void AddPair(discovery::PdProtocol protocol) {
    AddWorker("p", discovery::DisaggMode::kPrefill, protocol);
    AddWorker("d", discovery::DisaggMode::kDecode, protocol);
  }
  // The router with defaults and one prefill/decode pair (p, d) speaking `protocol`.
  void StartPair(discovery::PdProtocol protocol) {
    StartRouter();
    AddPair(protocol);
  }
  void TearDown() override {
    if (router_) {
      EXPECT_TRUE(WaitFor([&] { return router_->PendingGuards() == 0; }));
      for (const std::string& t : kTargets) EXPECT_EQ(router_->ActiveBlocks({t, 0}), 0u) << t;
      router_->Shutdown();
    }
  }
  Answer Call(const std::string& path, const std::string& body, const std::string& headers = "") {
    TestClient c(router_->port());
    c.Write(path == "/metrics" ? "GET" : "POST", path, body, headers);
    return c.ReadAnswer();
  }
  std::string Metrics() { return Call("/metrics", "").body; }
  bool HasMetric(const std::string& line) { return Metrics().find(line) != std::string::npos; }
  json SentBody(size_t i) { return json::parse(fake_->sent().at(i).body); }
  std::vector<SentRequest> SentTo(const std::string& host_port) {
    std::vector<SentRequest> out;
    for (const SentRequest& s : fake_->sent()) {
      if (s.host_port == host_port) out.push_back(s);
    }
    return out;
  }

  TestClock clock_;
  std::unique_ptr<Router> router_;
  FakeUpstream* fake_ = nullptr;
};

TEST_F(PdDispatcherTest, SglangSendsBothLegsAtOnceWithOneBootstrapRoom) {
  StartPair(discovery::PdProtocol::kSglangBootstrap);
  fake_->Push("p:1", Script{.pieces = {kOk}, .hold = true});
  fake_->Push("d:1", Script{.content_type = "text/event-stream",
                            .pieces = {SseText("Hel"), "data: [DONE]\n\n"},
                            .hold = true});
  TestClient c(router_->port());
  c.Write("POST", "/v1/completions", Completion(R"(,"stream":true,"max_tokens":5)"));
  // Both legs are out while neither has finished: concurrent.
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 2; }));
  EXPECT_EQ(router_->ActiveBlocks({"p:1", 0}), 4u);
  EXPECT_EQ(router_->ActiveBlocks({"d:1", 0}), 4u);
  EXPECT_EQ(router_->PendingGuards(), 2u);
  fake_->Release();
  Answer a = c.ReadAnswer();
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.headers.Get("X-Infera-Worker-Id"), "d:1");
  EXPECT_EQ(a.body, SseText("Hel") + "data: [DONE]\n\n");
  json pre = json::parse(SentTo("p:1").at(0).body);
  json dec = json::parse(SentTo("d:1").at(0).body);
  EXPECT_EQ(pre["bootstrap_host"], "p");
  EXPECT_EQ(pre["bootstrap_port"], 8998);
  ASSERT_TRUE(pre["bootstrap_room"].is_number_unsigned());
  EXPECT_LT(pre["bootstrap_room"].get<uint64_t>(), uint64_t{1} << 63);
  // The same body to both legs, the client's fields untouched.
  EXPECT_EQ(pre, dec);
  EXPECT_EQ(dec["stream"], true);
  EXPECT_EQ(dec["max_tokens"], 5);
  EXPECT_EQ(dec["prompt"].size(), 64u);
  std::string m = Metrics();
  EXPECT_NE(m.find(R"(infera_router_picks_total{role="prefill",worker_id="p:1"} 1)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(R"(infera_router_picks_total{role="decode",worker_id="d:1"} 1)"),
            std::string::npos);
  EXPECT_NE(m.find(R"(infera_pd_dispatch_duration_seconds_count{leg="prefill",worker_id="p:1"} 1)"),
            std::string::npos);
  EXPECT_NE(m.find(R"(infera_pd_dispatch_duration_seconds_count{leg="decode",worker_id="d:1"} 1)"),
            std::string::npos);
  EXPECT_NE(m.find(R"(infera_pd_plans_total{kind="disaggregated"} 1)"), std::string::npos);
}

TEST_F(PdDispatcherTest, SglangRoomsDifferPerRequestAndFollowThePrefillDpRank) {
  StartRouter();
  discovery::WorkerRecord r = testing::WorkerRecordOf("p");
  r.disagg_mode = discovery::DisaggMode::kPrefill;
  r.pd_protocol = discovery::PdProtocol::kSglangBootstrap;
  r.disagg_protocol = "sglang-bootstrap";
  r.pd.bootstrap_host = "p";
  r.pd.bootstrap_port = 9000;
  r.dp_size = 4;
  router_->AddWorker(r);
  AddWorker("d", discovery::DisaggMode::kDecode, discovery::PdProtocol::kSglangBootstrap);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Call("/v1/completions", Completion()).status, 200);
  std::vector<SentRequest> pre = SentTo("p:1");
  ASSERT_EQ(pre.size(), 8u);
  std::set<uint64_t> rooms;
  for (const SentRequest& s : pre) {
    json b = json::parse(s.body);
    const uint64_t room = b["bootstrap_room"].get<uint64_t>();
    EXPECT_EQ(room % 4, b["data_parallel_rank"].get<uint64_t>()) << b.dump();
    EXPECT_EQ(b["bootstrap_port"], 9000);
    rooms.insert(room);
  }
  EXPECT_EQ(rooms.size(), 8u);
}

TEST_F(PdDispatcherTest, ConcurrentPrefillHoldsUntilCompletionByDefault) {
  StartPair(discovery::PdProtocol::kVllmMooncake);
  fake_->Push("p:1", Script{.pieces = {kOk}});
  fake_->Push("d:1", Script{.pieces = {kOk}, .hold = true});
  TestClient c(router_->port());
  c.Write("POST", "/v1/completions", Completion());
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1 && fake_->sent().size() == 2; }));
  EXPECT_TRUE(WaitFor([&] {
    return Metrics().find(R"(infera_pd_dispatch_duration_seconds_count{leg="prefill")") !=
           std::string::npos;
  }));                                               // the prefill leg has answered ...
  EXPECT_EQ(router_->ActiveBlocks({"p:1", 0}), 4u);  // ... and still holds its blocks
  fake_->Release();
  EXPECT_EQ(c.ReadAnswer().status, 200);
}

TEST_F(PdDispatcherTest, GuardReleasePrefillFreesThePrefillBlocksWhenItAnswers) {
  RouterOptions opt;
  opt.pd.prefill_guard_release = PdGuardRelease::kPrefill;
  StartRouter(opt);
  AddPair(discovery::PdProtocol::kSglangBootstrap);
  fake_->Push("p:1", Script{.pieces = {kOk}});
  fake_->Push("d:1", Script{.pieces = {kOk}, .hold = true});
  TestClient c(router_->port());
  c.Write("POST", "/v1/completions", Completion());
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  EXPECT_TRUE(WaitFor([&] { return router_->ActiveBlocks({"p:1", 0}) == 0; }));
  EXPECT_EQ(router_->ActiveBlocks({"d:1", 0}), 4u);
  EXPECT_EQ(router_->PendingGuards(), 1u);
  fake_->Release();
  EXPECT_EQ(c.ReadAnswer().status, 200);
}

TEST_F(PdDispatcherTest, NixlIsSerialAndPassesKvTransferParamsVerbatim) {
  StartPair(discovery::PdProtocol::kVllmNixl);
  const json kv = {{"do_remote_prefill", true},
                   {"do_remote_decode", false},
                   {"remote_block_ids", {1, 2, 3, 4}},
                   {"remote_engine_id", "e1"},
                   {"remote_host", "p"},
                   {"remote_port", 5600},
                   {"remote_request_id", "rr-1"},
                   {"tp_size", 1}};
  fake_->Push(
      "p:1",
      Script{.pieces = {json({{"choices", json::array()}, {"kv_transfer_params", kv}}).dump()},
             .hold = true});
  fake_->Push("d:1", Script{.content_type = "text/event-stream",
                            .pieces = {SseText("Hi"), "data: [DONE]\n\n"},
                            .hold = true});
  TestClient c(router_->port());
  c.Write("POST", "/v1/completions",
          Completion(R"(,"stream":true,"max_tokens":8,"min_tokens":2,)"
                     R"("stream_options":{"include_usage":true})"));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  EXPECT_EQ(fake_->sent().size(), 1u);  // serial: decode waits for the prefill's answer
  fake_->Release();
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1 && fake_->sent().size() == 2; }));
  // Serial: the prefill's holds went when it answered.
  EXPECT_EQ(router_->ActiveBlocks({"p:1", 0}), 0u);
  EXPECT_EQ(router_->ActiveBlocks({"d:1", 0}), 4u);
  fake_->Release();
  Answer a = c.ReadAnswer();
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, SseText("Hi") + "data: [DONE]\n\n");
  json pre = SentBody(0), dec = SentBody(1);
  EXPECT_EQ(fake_->sent()[0].host_port, "p:1");
  EXPECT_EQ(pre["max_tokens"], 1);
  EXPECT_EQ(pre["stream"], false);
  EXPECT_FALSE(pre.contains("stream_options"));
  EXPECT_FALSE(pre.contains("min_tokens"));
  EXPECT_EQ(pre["kv_transfer_params"], json({{"do_remote_decode", true},
                                             {"do_remote_prefill", false},
                                             {"remote_engine_id", nullptr},
                                             {"remote_block_ids", nullptr},
                                             {"remote_host", nullptr},
                                             {"remote_port", nullptr}}));
  EXPECT_EQ(fake_->sent()[1].host_port, "d:1");
  EXPECT_EQ(dec["kv_transfer_params"], kv);
  EXPECT_EQ(dec["stream"], true);
  EXPECT_EQ(dec["max_tokens"], 8);
  EXPECT_EQ(dec["min_tokens"], 2);
  EXPECT_EQ(dec["stream_options"]["include_usage"], true);
}

TEST_F(PdDispatcherTest, MooncakeSendsTransferIdAndMaxTokensMinusOne) {
  StartPair(discovery::PdProtocol::kVllmMooncake);
  EXPECT_EQ(
      Call("/v1/completions", Completion(R"(,"max_tokens":8)"), "X-Infera-Request-Id: req-42\r\n")
          .status,
      200);
  json pre = json::parse(SentTo("p:1").at(0).body);
  json dec = json::parse(SentTo("d:1").at(0).body);
  EXPECT_EQ(pre["max_tokens"], 1);
  EXPECT_EQ(pre["stream"], false);
  EXPECT_EQ(pre["kv_transfer_params"], json({{"do_remote_decode", true},
                                             {"do_remote_prefill", false},
                                             {"transfer_id", "xfer-req-42"}}));
  EXPECT_EQ(dec["max_tokens"], 7);
  EXPECT_EQ(dec["kv_transfer_params"], json({{"do_remote_decode", false},
                                             {"do_remote_prefill", true},
                                             {"remote_bootstrap_addr", "http://p:8998"},
                                             {"remote_engine_id", "engine-p"},
                                             {"transfer_id", "xfer-req-42"}}));
}

TEST_F(PdDispatcherTest, AMissingPoolIs503NamingIt) {
  StartRouter();
  AddWorker("p", discovery::DisaggMode::kPrefill, discovery::PdProtocol::kVllmNixl);
  Answer a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 503);
  json err = json::parse(a.body)["error"];
  EXPECT_EQ(err["message"],
            "no decode worker available for this model (1 prefill protocol present: vllm-nixl); "
            "PD needs both pools");
  EXPECT_EQ(err["type"], "service_unavailable");
  router_->RemoveWorker("p:1");
  AddWorker("d", discovery::DisaggMode::kDecode, discovery::PdProtocol::kVllmNixl);
  a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 503);
  EXPECT_NE(a.body.find("no prefill worker available"), std::string::npos) << a.body;
  EXPECT_TRUE(fake_->sent().empty());
}

TEST_F(PdDispatcherTest, ProtocolsThatDisagreeAre501) {
  StartRouter();
  AddWorker("p", discovery::DisaggMode::kPrefill, discovery::PdProtocol::kVllmNixl);
  AddWorker("d", discovery::DisaggMode::kDecode, discovery::PdProtocol::kSglangBootstrap);
  Answer a =
      Call("/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(a.status, 501);
  EXPECT_EQ(json::parse(a.body)["error"]["message"],
            "prefill and decode workers speak different PD protocols (prefill: vllm-nixl; "
            "decode: sglang-bootstrap)");
  EXPECT_TRUE(fake_->sent().empty());
}

TEST_F(PdDispatcherTest, MixedWorkersServeAloneWithoutACompletePair) {
  StartRouter();
  AddWorker("p", discovery::DisaggMode::kPrefill, discovery::PdProtocol::kVllmNixl);
  AddWorker("m", discovery::DisaggMode::kMixed, discovery::PdProtocol::kNone);
  Answer a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.headers.Get("X-Infera-Worker-Id"), "m:1");
  ASSERT_EQ(fake_->sent().size(), 1u);
  EXPECT_FALSE(SentBody(0).contains("kv_transfer_params"));
  EXPECT_TRUE(HasMetric(R"(infera_router_picks_total{role="mixed",worker_id="m:1"} 1)"));
}

TEST_F(PdDispatcherTest, AFailedPrefillFailsOverToAnotherPrefillWorker) {
  StartPair(discovery::PdProtocol::kVllmNixl);
  AddWorker("p2", discovery::DisaggMode::kPrefill, discovery::PdProtocol::kVllmNixl);
  const json kv = {{"remote_request_id", "from-the-good-one"}};
  fake_->Push("p:1", Script{.status = 503, .pieces = {R"({"error":{"message":"busy"}})"}});
  fake_->Push("p2:1", Script{.pieces = {json({{"kv_transfer_params", kv}}).dump()}});
  // Ties rotate, so p:1 is picked first at least once in two requests.
  for (int i = 0; i < 2; ++i) {
    Answer a = Call("/v1/completions", Completion());
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.headers.Get("X-Infera-Worker-Id"), "d:1");
  }
  const size_t failed = SentTo("p:1").size();
  ASSERT_GE(failed, 1u);
  EXPECT_EQ(SentTo("p2:1").size(), 2u);
  ASSERT_EQ(SentTo("d:1").size(), 2u);  // the decode leg only after a good prefill
  for (const SentRequest& s : SentTo("d:1")) {
    EXPECT_EQ(json::parse(s.body)["kv_transfer_params"], kv);
  }
  std::string m = Metrics();
  EXPECT_NE(m.find(R"(infera_pd_bootstrap_failures_total{reason="prefill_status"} )" +
                   std::to_string(failed)),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(R"(infera_router_failovers_total)"), std::string::npos);
}

TEST_F(PdDispatcherTest, APrefillWaitingOnAWorkerThatTurnsUnhealthyFailsOver) {
  RouterOptions opt;
  opt.health_check.interval_ms = 10;
  StartRouter(opt);
  AddPair(discovery::PdProtocol::kVllmNixl);
  const json kv = {{"remote_request_id", "from-the-good-one"}};
  fake_->Push("p:1", Script{.pieces = {kOk}, .hold_before_head = true});  // frozen
  fake_->Push("p2:1", Script{.pieces = {json({{"kv_transfer_params", kv}}).dump()}});
  TestClient c(router_->port());
  c.Write("POST", "/v1/completions", Completion());
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));  // the prefill waits on p
  AddWorker("p2", discovery::DisaggMode::kPrefill, discovery::PdProtocol::kVllmNixl);
  fake_->PushHealth("p:1", Script{.status = 503});
  Answer a = c.ReadAnswer();
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.headers.Get("X-Infera-Worker-Id"), "d:1");
  EXPECT_EQ(fake_->cancelled(), 1);  // the frozen prefill exchange was closed
  ASSERT_EQ(SentTo("d:1").size(), 1u);
  EXPECT_EQ(json::parse(SentTo("d:1")[0].body)["kv_transfer_params"], kv);
  EXPECT_TRUE(
      HasMetric(R"(infera_router_upstream_errors_total{worker_id="p:1",kind="unhealthy"} 1)"));
}

TEST_F(PdDispatcherTest, EveryPrefillFailingIs502WithThePrefillsMessage) {
  StartPair(discovery::PdProtocol::kVllmNixl);
  fake_->Push("p:1", Script{.send_error = absl::UnavailableError("connection refused")});
  Answer a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 502);
  EXPECT_EQ(json::parse(a.body)["error"]["message"],
            "the prefill worker failed before answering (connection failed)");
  EXPECT_TRUE(SentTo("d:1").empty());
  EXPECT_TRUE(HasMetric(R"(infera_pd_bootstrap_failures_total{reason="prefill_unreachable"} 1)"));
}

TEST_F(PdDispatcherTest, ANixlPrefillAnswerWithoutKvTransferParamsIs502) {
  StartPair(discovery::PdProtocol::kVllmNixl);
  fake_->Push("p:1", Script{.pieces = {kOk}});
  Answer a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 502);
  EXPECT_NE(json::parse(a.body)["error"]["message"].get<std::string>().find(
                "the prefill worker answered without what the decode leg needs"),
            std::string::npos)
      << a.body;
  EXPECT_TRUE(SentTo("d:1").empty());
  EXPECT_TRUE(
      HasMetric(R"(infera_pd_bootstrap_failures_total{reason="missing_kv_transfer_params"} 1)"));
}

TEST_F(PdDispatcherTest, AConcurrentPrefillFailureCancelsTheWaitingDecode) {
  StartPair(discovery::PdProtocol::kSglangBootstrap);
  fake_->Push("p:1", Script{.status = 500, .pieces = {R"({"error":{"message":"oom"}})"}});
  fake_->Push("d:1", Script{.hold_before_head = true});
  Answer a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 502);
  EXPECT_EQ(json::parse(a.body)["error"]["message"], "the prefill worker answered 500: oom");
  // The decode leg was cancelled while it waited, or not sent when the prefill had
  // failed first (both legs start on one loop; either may go first).
  EXPECT_EQ(fake_->cancelled(), static_cast<int>(SentTo("d:1").size()));
  EXPECT_EQ(fake_->held(), 0);
}

TEST_F(PdDispatcherTest, APrefill4xxIsTheClientsAnswer) {
  StartPair(discovery::PdProtocol::kVllmNixl);
  fake_->Push("p:1", Script{.status = 400, .pieces = {R"({"error":{"message":"too long"}})"}});
  Answer a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(json::parse(a.body)["error"]["message"], "too long");
  EXPECT_TRUE(SentTo("d:1").empty());
}

TEST_F(PdDispatcherTest, DecodeRetriesBeforeItsFirstByteWithoutResendingThePrefill) {
  StartPair(discovery::PdProtocol::kSglangBootstrap);
  fake_->Push("d:1", Script{.status = 503});
  fake_->Push("d:1", Script{.send_error = absl::UnavailableError("connection reset")});
  fake_->Push("d:1", Script{.pieces = {kOk}});
  Answer a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, kOk);
  EXPECT_EQ(SentTo("p:1").size(), 1u);
  ASSERT_EQ(SentTo("d:1").size(), 3u);
  EXPECT_EQ(SentTo("d:1")[2].body, SentTo("p:1")[0].body);  // the same room every time
  EXPECT_EQ(fake_->cancelled(), 0);                         // the prefill leg was left alone
  std::string m = Metrics();
  EXPECT_NE(m.find(R"(infera_pd_bootstrap_failures_total{reason="decode_status"} 1)"),
            std::string::npos);
  EXPECT_NE(m.find(R"(infera_pd_bootstrap_failures_total{reason="decode_unreachable"} 1)"),
            std::string::npos);
}

TEST_F(PdDispatcherTest, ADecodeFailingEveryTryIs502) {
  StartPair(discovery::PdProtocol::kVllmMooncake);
  fake_->Push("d:1", Script{.status = 500, .pieces = {R"({"error":{"message":"KV lost"}})"}});
  Answer a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 502);
  EXPECT_EQ(json::parse(a.body)["error"]["message"], "the worker answered 500: KV lost");
  EXPECT_EQ(SentTo("d:1").size(), 3u);
  EXPECT_EQ(SentTo("p:1").size(), 1u);
  EXPECT_TRUE(HasMetric(R"(outcome="upstream_error"} 1)"));
}

TEST_F(PdDispatcherTest, ADecodeWorkerFailingBeforeItsFirstByteFailsOverToAnotherPair) {
  StartPair(discovery::PdProtocol::kVllmMooncake);
  AddWorker("d2", discovery::DisaggMode::kDecode, discovery::PdProtocol::kVllmMooncake);
  // The first decode pick (d:1 at this seed; d2:1 is unscripted: it answers) is gone.
  for (int i = 0; i < 3; ++i) {
    fake_->Push("d:1", Script{.send_error = absl::UnavailableError("connection refused")});
  }
  Answer a = Call("/v1/completions", Completion(), "X-Infera-Request-Id: fo-1\r\n");
  EXPECT_EQ(a.status, 200);
  ASSERT_EQ(SentTo("d:1").size(), 3u);
  ASSERT_EQ(SentTo("d2:1").size(), 1u);
  // The KV hand-off died with d:1: the prefill goes again, under its own transfer id.
  ASSERT_EQ(SentTo("p:1").size(), 2u);
  const json first = json::parse(SentTo("p:1")[0].body);
  const json second = json::parse(SentTo("p:1")[1].body);
  const json decode = json::parse(SentTo("d2:1")[0].body);
  EXPECT_EQ(first["kv_transfer_params"]["transfer_id"], "xfer-fo-1");
  EXPECT_EQ(second["kv_transfer_params"]["transfer_id"], "xfer-fo-1-1");
  EXPECT_EQ(decode["kv_transfer_params"]["transfer_id"], "xfer-fo-1-1");
  std::string m = Metrics();
  EXPECT_NE(m.find(R"(infera_router_failovers_total{worker_id="d2:1"} 1)"), std::string::npos);
  EXPECT_NE(m.find(R"(infera_pd_plans_total{kind="disaggregated"} 2)"), std::string::npos);
  EXPECT_TRUE(HasMetric(R"(outcome="success"} 1)"));
}

TEST_F(PdDispatcherTest, ADecodeFailureAfterTheFirstByteIsOneSseErrorEvent) {
  StartPair(discovery::PdProtocol::kVllmNixl);
  fake_->Push("p:1", Script{.pieces = {R"({"kv_transfer_params":{"x":1}})"}});
  fake_->Push("d:1", Script{.content_type = "text/event-stream",
                            .pieces = {SseText("Hel")},
                            .read_error = absl::UnavailableError("connection reset")});
  Answer a = Call("/v1/completions", Completion(R"(,"stream":true)"));
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body.find(SseText("Hel")), 0u);
  const std::string tail = a.body.substr(SseText("Hel").size());
  EXPECT_EQ(tail.rfind("data: {\"error\"", 0), 0u) << a.body;
  EXPECT_NE(tail.find("the worker failed mid-stream"), std::string::npos);
  EXPECT_EQ(SentTo("d:1").size(), 1u);  // no retry after the first byte
}

TEST_F(PdDispatcherTest, ClientDisconnectCancelsBothLegs) {
  StartPair(discovery::PdProtocol::kSglangBootstrap);
  fake_->Push("p:1", Script{.pieces = {kOk}, .hold = true});
  fake_->Push(
      "d:1", Script{.content_type = "text/event-stream", .pieces = {SseText("Hel")}, .hold = true});
  {
    TestClient c(router_->port());
    c.Write("POST", "/v1/completions", Completion(R"(,"stream":true)"));
    c.ReadUntil("Hel");
    ASSERT_TRUE(WaitFor([&] { return fake_->held() == 2; }));
    c.Abort();
  }
  EXPECT_TRUE(WaitFor([&] { return fake_->cancelled() == 2; }));
  EXPECT_TRUE(WaitFor([&] { return HasMetric(R"(endpoint="completions",status="499"} 1)"); }));
}

TEST_F(PdDispatcherTest, ClientDisconnectDuringASerialPrefillCancelsIt) {
  StartPair(discovery::PdProtocol::kVllmNixl);
  fake_->Push("p:1", Script{.hold_before_head = true});
  {
    TestClient c(router_->port());
    c.Write("POST", "/v1/completions", Completion());
    ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
    c.Abort();
  }
  EXPECT_TRUE(WaitFor([&] { return fake_->cancelled() == 1; }));
  EXPECT_TRUE(WaitFor([&] { return HasMetric(R"(endpoint="completions",status="499"} 1)"); }));
  EXPECT_TRUE(SentTo("d:1").empty());
}

TEST_F(PdDispatcherTest, ConditionalDisaggregationSendsShortPromptsToDecodeAlone) {
  RouterOptions opt;
  opt.pd.min_uncached_tokens = 1000;
  StartRouter(opt);
  AddPair(discovery::PdProtocol::kVllmNixl);
  Answer a = Call("/v1/completions", Completion(R"(,"max_tokens":3)"));
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.headers.Get("X-Infera-Worker-Id"), "d:1");
  ASSERT_EQ(fake_->sent().size(), 1u);
  EXPECT_EQ(SentBody(0), json::parse(Completion(R"(,"max_tokens":3)")));  // no PD fields
  std::string m = Metrics();
  EXPECT_NE(m.find(R"(infera_pd_plans_total{kind="decode-only"} 1)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(infera_router_picks_total{role="decode",worker_id="d:1"} 1)"),
            std::string::npos);
}

TEST_F(PdDispatcherTest, PrefillDeadlineIs504) {
  RouterOptions opt;
  opt.request_timeout_ms = 1000;
  StartRouter(opt);
  AddPair(discovery::PdProtocol::kVllmNixl);
  fake_->Push("p:1", Script{.hold_before_head = true});
  TestClient c(router_->port());
  c.Write("POST", "/v1/completions", Completion());
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  clock_.Advance(1000 * 1'000'000);
  fake_->Expire();
  Answer a = c.ReadAnswer();
  EXPECT_EQ(a.status, 504);
  EXPECT_EQ(json::parse(a.body)["error"]["message"],
            "the prefill worker did not answer within 1000 ms");
  EXPECT_TRUE(SentTo("d:1").empty());
}

TEST_F(PdDispatcherTest, LocalResourceErrorsOnEitherLegAre503AndSpareTheBreakers) {
  RouterOptions opt;
  opt.breaker_failures = 1;
  StartRouter(opt);
  AddPair(discovery::PdProtocol::kVllmNixl);
  const auto emfile = http::LocalResourceError("emfile", "connect p:1: out of local resources");
  const std::string prefill_answer =
      json({{"choices", json::array()},
            {"kv_transfer_params", {{"do_remote_prefill", true}, {"remote_engine_id", "e1"}}}})
          .dump();
  // A host's last script repeats: the prefill fails locally once, then answers; the
  // decode's connect fails locally once, then it answers.
  fake_->Push("p:1", Script{.send_error = emfile});
  fake_->Push("p:1", Script{.pieces = {prefill_answer}});
  fake_->Push("d:1", Script{.send_error = emfile});
  fake_->Push("d:1", Script{});
  Answer a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 503);
  EXPECT_NE(a.body.find("the router is out of local resources"), std::string::npos) << a.body;
  EXPECT_TRUE(SentTo("d:1").empty());  // no decode, no failover
  a = Call("/v1/completions", Completion());
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(SentTo("d:1").size(), 1u);  // not retried
  const std::string m = Metrics();
  EXPECT_NE(m.find(R"(infera_router_local_errors_total{kind="emfile"} 2)"), std::string::npos) << m;
  EXPECT_EQ(m.find("infera_router_upstream_errors_total{"), std::string::npos) << m;
  // One failure would have opened either breaker: both still admit requests.
  EXPECT_EQ(Call("/v1/completions", Completion()).status, 200);
}

}  // namespace
}  // namespace infera::router
