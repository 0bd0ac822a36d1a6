// Decode input demand in the router, in-process (as pd_dispatcher_test): real server
// on port 0, a FakeUpstream playing the prefill and decode workers, a test clock. The
// decode leg's reservation is booked at the pick and released exactly once on EOF,
// cancellation, failure or an abandoned attempt, and survives the worker leaving
// discovery (doc/decode-demand.md). Each test ends with every hold released.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "router/plan/decode_demand_routing.h"
#include "router/dispatch/fake_upstream.h"
#include "router/router.h"
#include "router/router_test_support.h"
#include "testing/wait_for.h"

namespace infera::router {
namespace {

using nlohmann::json;

const char kOk[] = R"({"choices":[{"index":0,"text":"ok"}]})";

// A completion whose prompt is `tokens` token ids (the router counts them exactly).
std::string Completion(int tokens, const std::string& extra = "") {
  std::string prompt = "[";
  for (int i = 0; i < tokens; ++i) prompt += (i ? "," : "") + std::to_string(i + 1);
  return R"({"model":"m","prompt":)" + prompt + "]" + extra + "}";
}
std::string Sse(const std::string& text) {
  return "data: " + json({{"choices", {{{"index", 0}, {"text", text}}}}}).dump() + "\n\n";
}
std::string Gauge(const char* name, const std::string& target, uint64_t v) {
  return std::string(name) + "{target=\"" + target + "\"} " + std::to_string(v) + "\n";
}
std::string Tokens(const std::string& target, uint64_t v) {
  return Gauge("infera_router_decode_demand_tokens", target, v);
}
std::string Requests(const std::string& target, uint64_t v) {
  return Gauge("infera_router_decode_demand_requests", target, v);
}

// infera_router_decode_demand_decisions_total{mode,input,*} summed over `agrees`.
uint64_t Decisions(const std::string& metrics, const std::string& mode, const std::string& input) {
  uint64_t sum = 0;
  for (const char* agrees : {"false", "true"}) {
    const std::string key = "infera_router_decode_demand_decisions_total{mode=\"" + mode +
                            "\",input=\"" + input + "\",agrees=\"" + agrees + "\"} ";
    const size_t at = metrics.find(key);
    if (at != std::string::npos) sum += std::stoull(metrics.substr(at + key.size()));
  }
  return sum;
}

class DecodeDemandRouterTest : public ::testing::Test {
 protected:
  void StartRouter(core::DemandMode mode, double weight = 0, RouterOptions opt = {}) {
    opt.demand = {.mode = mode, .request_weight = weight};
    router_ = testing::StartTestRouter(std::move(opt), clock_, 7, &fake_);  // kv-aware
    ASSERT_TRUE(router_);
  }
  void AddWorker(const std::string& host, discovery::DisaggMode mode,
                 discovery::PdProtocol protocol = discovery::PdProtocol::kSglangBootstrap) {
    router_->AddWorker(testing::PdWorkerRecord(host, mode, protocol));
  }
  // p:1 prefill, d:1 and e:1 decode (sglang-bootstrap).
  void AddFleet() {
    AddWorker("p", discovery::DisaggMode::kPrefill);
    AddWorker("d", discovery::DisaggMode::kDecode);
    AddWorker("e", discovery::DisaggMode::kDecode);
  }
  void TearDown() override {
    if (router_) {
      EXPECT_TRUE(WaitFor([&] { return router_->PendingGuards() == 0; }));
      EXPECT_TRUE(WaitFor([&] { return router_->PendingDemandReservations() == 0; }));
      const std::string m = Metrics();
      EXPECT_EQ(
          m.find("infera_router_decode_demand_tokens{target=\"d:1\"} 0\n") != std::string::npos,
          mode_shown_)
          << m;
      router_->Shutdown();
    }
  }
  Answer Call(const std::string& body) {
    TestClient c(router_->port());
    c.Write("POST", "/v1/completions", body);
    return c.ReadAnswer();
  }
  std::string Metrics() {
    TestClient c(router_->port());
    c.Write("GET", "/metrics", "");
    return c.ReadAnswer().body;
  }
  bool HasMetric(const std::string& line) { return Metrics().find(line) != std::string::npos; }
  // The decode worker of the last decode leg sent (the prefill leg may be sent after it).
  std::string LastDecode() {
    const std::vector<SentRequest> sent = fake_->sent();
    for (auto it = sent.rbegin(); it != sent.rend(); ++it) {
      if (it->host_port == "d:1" || it->host_port == "e:1") return it->host_port;
    }
    return "";
  }

  TestClock clock_;
  std::unique_ptr<Router> router_;
  FakeUpstream* fake_ = nullptr;
  bool mode_shown_ = true;  // the gauges exist (shadow|on)
};

TEST(ParseDemandOptionsTest, FlagsEnvAndStartUpErrors) {
  auto none = ParseDemandOptions(std::nullopt, std::nullopt, core::Policy::kRoundRobin);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->mode, core::DemandMode::kOff);  // the default, under any policy
  EXPECT_EQ(none->request_weight, 0);
  auto on = ParseDemandOptions("on", "1000000", core::Policy::kKvAware);
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(on->mode, core::DemandMode::kOn);
  EXPECT_EQ(on->request_weight, 1e6);
  EXPECT_EQ(ParseDemandOptions("shadow", std::nullopt, core::Policy::kKvAware)->mode,
            core::DemandMode::kShadow);
  // Requires --router-policy kv-aware.
  auto rr = ParseDemandOptions("shadow", std::nullopt, core::Policy::kRoundRobin);
  ASSERT_FALSE(rr.ok());
  EXPECT_NE(rr.status().message().find("requires --router-policy kv-aware"), std::string::npos);
  // The weight requires shadow|on (also when the mode is an explicit off).
  for (const std::optional<std::string>& mode :
       {std::optional<std::string>(), std::optional<std::string>("off")}) {
    auto w = ParseDemandOptions(mode, "5", core::Policy::kKvAware);
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find("requires --decode-input-demand shadow or on"),
              std::string::npos);
  }
  EXPECT_FALSE(ParseDemandOptions("yes", std::nullopt, core::Policy::kKvAware).ok());
  EXPECT_FALSE(ParseDemandOptions("on", "-1", core::Policy::kKvAware).ok());
  EXPECT_FALSE(ParseDemandOptions("on", "inf", core::Policy::kKvAware).ok());
  EXPECT_FALSE(ParseDemandOptions("on", "12x", core::Policy::kKvAware).ok());
  EXPECT_FALSE(ParseDemandOptions("on", "", core::Policy::kKvAware).ok());
}

// `on`: the second request avoids the decode target holding the first one's tokens;
// the gauges show each target's in-flight input tokens and held requests.
TEST_F(DecodeDemandRouterTest, OnPicksTheLowestProjectedDemandAndBooksIt) {
  StartRouter(core::DemandMode::kOn);
  AddFleet();
  fake_->Push("p:1", Script{.pieces = {kOk}});
  fake_->Push("d:1", Script{.pieces = {kOk}, .hold = true});
  fake_->Push("e:1", Script{.pieces = {kOk}, .hold = true});
  TestClient a(router_->port());
  a.Write("POST", "/v1/completions", Completion(64, R"(,"n":2)"));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  const std::string first = LastDecode();
  const std::string other = first == "d:1" ? "e:1" : "d:1";
  TestClient b(router_->port());
  b.Write("POST", "/v1/completions", Completion(40));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 2; }));
  EXPECT_EQ(LastDecode(), other);
  EXPECT_EQ(router_->PendingDemandReservations(), 2u);
  const std::string m = Metrics();
  EXPECT_NE(m.find(Tokens(first, 128)), std::string::npos) << m;  // 64 tokens × n = 2
  EXPECT_NE(m.find(Requests(first, 1)), std::string::npos) << m;
  EXPECT_NE(m.find(Tokens(other, 40)), std::string::npos) << m;
  EXPECT_NE(m.find(Requests(other, 1)), std::string::npos) << m;
  fake_->Release();
  EXPECT_EQ(a.ReadAnswer().status, 200);
  EXPECT_EQ(b.ReadAnswer().status, 200);
  EXPECT_TRUE(WaitFor([&] { return router_->PendingDemandReservations() == 0; }));
  const std::string after = Metrics();
  EXPECT_NE(after.find(Tokens("d:1", 0)), std::string::npos) << after;
  EXPECT_NE(after.find(Tokens("e:1", 0)), std::string::npos) << after;
  EXPECT_NE(after.find(Requests("e:1", 0)), std::string::npos) << after;
  // Two exact decisions were counted under mode="on".
  EXPECT_EQ(Decisions(after, "on", "exact"), 2u) << after;
}

// The request-count weight: with W large, the target holding more requests loses even
// with fewer tokens.
TEST_F(DecodeDemandRouterTest, RequestWeightCountsHeldRequests) {
  StartRouter(core::DemandMode::kOn, /*weight=*/1000);
  AddFleet();
  fake_->Push("p:1", Script{.pieces = {kOk}});
  fake_->Push("d:1", Script{.pieces = {kOk}, .hold = true});
  fake_->Push("e:1", Script{.pieces = {kOk}, .hold = true});
  // Two small requests, then a big one: each avoids the busiest target.
  TestClient a(router_->port()), b(router_->port()), c(router_->port()), d(router_->port());
  a.Write("POST", "/v1/completions", Completion(500));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  const std::string big = LastDecode();
  const std::string small = big == "d:1" ? "e:1" : "d:1";
  b.Write("POST", "/v1/completions", Completion(8));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 2; }));
  EXPECT_EQ(LastDecode(), small);
  c.Write("POST", "/v1/completions", Completion(8));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 3; }));
  // big: 500 + 8 + 1000 × 1 = 1508; small: 8 + 8 + 1000 × 1 = 1016 -> small.
  EXPECT_EQ(LastDecode(), small);
  d.Write("POST", "/v1/completions", Completion(8));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 4; }));
  // big: 1508; small: 16 + 8 + 2000 = 2024 -> big (token-only demand would pick small).
  EXPECT_EQ(LastDecode(), big);
  EXPECT_TRUE(HasMetric(Requests(small, 2)));
  fake_->Release();
  for (TestClient* t : {&a, &b, &c, &d}) EXPECT_EQ(t->ReadAnswer().status, 200);
}

// `shadow`: the original choice is kept and booked; the decision is counted.
TEST_F(DecodeDemandRouterTest, ShadowKeepsTheOriginalChoiceAndBooksIt) {
  StartRouter(core::DemandMode::kShadow);
  AddFleet();
  fake_->Push("p:1", Script{.pieces = {kOk}});
  fake_->Push("d:1", Script{.pieces = {kOk}, .hold = true});
  fake_->Push("e:1", Script{.pieces = {kOk}, .hold = true});
  TestClient a(router_->port());
  a.Write("POST", "/v1/completions", Completion(64));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  const std::string picked = LastDecode();
  EXPECT_TRUE(HasMetric(Tokens(picked, 64)));
  fake_->Release();
  EXPECT_EQ(a.ReadAnswer().status, 200);
  EXPECT_EQ(Decisions(Metrics(), "shadow", "exact"), 1u);
}

// `off` (the default): no counting, no reservations, no gauges.
TEST_F(DecodeDemandRouterTest, OffCountsNothing) {
  StartRouter(core::DemandMode::kOff);
  mode_shown_ = false;
  AddFleet();
  EXPECT_EQ(Call(Completion(64)).status, 200);
  const std::string m = Metrics();
  EXPECT_EQ(m.find("infera_router_decode_demand_tokens{"), std::string::npos) << m;
  EXPECT_NE(m.find("# TYPE infera_router_decode_demand_tokens gauge"), std::string::npos);
  EXPECT_NE(
      m.find(
          R"(infera_router_decode_demand_decisions_total{mode="on",input="exact",agrees="true"} 0)"),
      std::string::npos);
}

// Prefill and mixed selection are unchanged: a fleet of mixed workers books nothing.
TEST_F(DecodeDemandRouterTest, MixedPicksAreNotBooked) {
  StartRouter(core::DemandMode::kOn);
  mode_shown_ = false;  // no decode workers: no series
  AddWorker("m", discovery::DisaggMode::kMixed, discovery::PdProtocol::kNone);
  fake_->Push("m:1", Script{.pieces = {kOk}, .hold = true});
  TestClient a(router_->port());
  a.Write("POST", "/v1/completions", Completion(64));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  EXPECT_EQ(router_->PendingDemandReservations(), 0u);
  fake_->Release();
  EXPECT_EQ(a.ReadAnswer().status, 200);
}

// Multimodal and untokenized requests count as estimates (chat without a tokenizer:
// bytes / 4, the data: URL skipped).
TEST_F(DecodeDemandRouterTest, EstimatedInputForUntokenizedAndImageRequests) {
  StartRouter(core::DemandMode::kOn);
  AddFleet();
  fake_->Push("p:1", Script{.pieces = {kOk}});
  fake_->Push("d:1", Script{.pieces = {kOk}, .hold = true});
  fake_->Push("e:1", Script{.pieces = {kOk}, .hold = true});
  const std::string text(400, 'x');
  const std::string chat =
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":")" + text +
      R"("},{"type":"image_url","image_url":{"url":"data:image/png;base64,)" +
      std::string(4000, 'A') + R"("}}]}]})";
  TestClient a(router_->port());
  a.Write("POST", "/v1/chat/completions", chat);
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  const std::string picked = LastDecode();
  const std::string m = Metrics();
  // ~400 bytes of text / 4 (plus the few bytes of roles and types), not the 4 KB image.
  const std::string key = "infera_router_decode_demand_tokens{target=\"" + picked + "\"} ";
  const size_t at = m.find(key);
  ASSERT_NE(at, std::string::npos) << m;
  const uint64_t tokens = std::stoull(m.substr(at + key.size()));
  EXPECT_GE(tokens, 100u);
  EXPECT_LT(tokens, 120u);
  fake_->Release();
  EXPECT_EQ(a.ReadAnswer().status, 200);
  EXPECT_EQ(Decisions(Metrics(), "on", "estimated"), 1u);
}

// Released exactly once however the request ends: client disconnect mid-stream.
TEST_F(DecodeDemandRouterTest, CancellationReleasesTheReservation) {
  StartRouter(core::DemandMode::kOn);
  AddFleet();
  fake_->Push("p:1", Script{.pieces = {kOk}});
  fake_->Push("d:1",
              Script{.content_type = "text/event-stream", .pieces = {Sse("Hel")}, .hold = true});
  fake_->Push("e:1",
              Script{.content_type = "text/event-stream", .pieces = {Sse("Hel")}, .hold = true});
  {
    TestClient c(router_->port());
    c.Write("POST", "/v1/completions", Completion(64, R"(,"stream":true)"));
    c.ReadUntil("Hel");
    EXPECT_EQ(router_->PendingDemandReservations(), 1u);
    c.Abort();
  }
  EXPECT_TRUE(WaitFor([&] { return router_->PendingDemandReservations() == 0; }));
  EXPECT_TRUE(WaitFor([&] { return HasMetric(R"(endpoint="completions",status="499"} 1)"); }));
}

// Failures: the decode leg fails before its first byte (502 to the client), and fails
// mid-stream (in-band error).
TEST_F(DecodeDemandRouterTest, FailureReleasesTheReservation) {
  StartRouter(core::DemandMode::kOn);
  AddFleet();
  fake_->Push("p:1", Script{.pieces = {kOk}});
  for (const char* d : {"d:1", "e:1"}) fake_->Push(d, Script{.status = 500, .pieces = {"{}"}});
  EXPECT_EQ(Call(Completion(64)).status, 502);
  EXPECT_EQ(router_->PendingDemandReservations(), 0u);
  for (const char* d : {"d:1", "e:1"}) {
    fake_->Push(d, Script{.content_type = "text/event-stream",
                          .pieces = {Sse("Hel")},
                          .read_error = absl::UnavailableError("reset")});
  }
  Answer a = Call(Completion(64, R"(,"stream":true)"));
  EXPECT_EQ(a.status, 200);
  EXPECT_NE(a.body.find("data: {\"error\""), std::string::npos) << a.body;
}

// An abandoned attempt (its prefill failed: the router retries on another prefill
// worker) releases its reservation before the next attempt books again: while the
// retried requests are held on decode, exactly one reservation per request is live.
TEST_F(DecodeDemandRouterTest, AbandonedAttemptReleasesBeforeTheRetry) {
  StartRouter(core::DemandMode::kOn);
  AddFleet();
  AddWorker("q", discovery::DisaggMode::kPrefill);
  fake_->Push("p:1", Script{.status = 500, .pieces = {"{}"}});  // every time
  fake_->Push("q:1", Script{.pieces = {kOk}});
  // Before their head, as an engine waiting for its KV: a failed prefill cancels them.
  fake_->Push("d:1", Script{.pieces = {kOk}, .hold_before_head = true});
  fake_->Push("e:1", Script{.pieces = {kOk}, .hold_before_head = true});
  std::vector<std::unique_ptr<TestClient>> clients;
  for (int i = 1; i <= 3; ++i) {
    clients.push_back(std::make_unique<TestClient>(router_->port()));
    clients.back()->Write("POST", "/v1/completions", Completion(64));
    // Held: the decode leg of the attempt whose prefill (q:1) answered.
    ASSERT_TRUE(WaitFor([&] {
      size_t q = 0;
      for (const SentRequest& r : fake_->sent()) q += r.host_port == "q:1";
      return static_cast<int>(q) == i && fake_->held() == i;
    }));
    EXPECT_EQ(router_->PendingDemandReservations(), static_cast<uint64_t>(i));
  }
  size_t failed = 0;
  for (const SentRequest& r : fake_->sent()) failed += r.host_port == "p:1";
  EXPECT_GE(failed, 1u);  // the less loaded p:1 was tried (and failed) at least once
  fake_->Release();
  for (auto& c : clients) EXPECT_EQ(c->ReadAnswer().status, 200);
}

// A worker leaving discovery mid-request: its live reservation survives (released when
// the request ends), and a worker recreated under the same key starts from zero: the
// late completion does not subtract from the new request's booking.
TEST_F(DecodeDemandRouterTest, WorkerLeavingMidRequestKeepsItsReservationUntilTheEnd) {
  StartRouter(core::DemandMode::kOn);
  AddWorker("p", discovery::DisaggMode::kPrefill);
  AddWorker("d", discovery::DisaggMode::kDecode);
  fake_->Push("p:1", Script{.pieces = {kOk}});
  fake_->Push("d:1",
              Script{.content_type = "text/event-stream", .pieces = {Sse("Hel")}, .hold = true});
  auto old_client = std::make_unique<TestClient>(router_->port());
  old_client->Write("POST", "/v1/completions", Completion(64, R"(,"stream":true)"));
  old_client->ReadUntil("Hel");
  EXPECT_TRUE(HasMetric(Tokens("d:1", 64)));
  router_->RemoveWorker("d:1");
  EXPECT_EQ(router_->PendingDemandReservations(), 1u);  // still live
  AddWorker("d", discovery::DisaggMode::kDecode);       // recreated
  EXPECT_TRUE(HasMetric(Tokens("d:1", 0)));
  TestClient fresh(router_->port());
  fresh.Write("POST", "/v1/completions", Completion(10, R"(,"stream":true)"));
  fresh.ReadUntil("Hel");
  EXPECT_TRUE(HasMetric(Tokens("d:1", 10)));
  EXPECT_EQ(router_->PendingDemandReservations(), 2u);
  old_client->Abort();  // the old request ends late
  old_client.reset();
  EXPECT_TRUE(WaitFor([&] { return router_->PendingDemandReservations() == 1; }));
  EXPECT_TRUE(HasMetric(Tokens("d:1", 10)));  // the recreated entry is untouched
  EXPECT_TRUE(HasMetric(Requests("d:1", 1)));
  fresh.Abort();
}

// --pd-prefill-guard-release prefill: the prefill's load goes when it answers, the
// decode reservation stays on the decode guard until the end.
TEST_F(DecodeDemandRouterTest, ReservationStaysOnTheDecodeGuardAfterPrefillRelease) {
  RouterOptions opt;
  opt.pd.prefill_guard_release = PdGuardRelease::kPrefill;
  StartRouter(core::DemandMode::kOn, 0, opt);
  AddFleet();
  fake_->Push("p:1", Script{.pieces = {kOk}});
  fake_->Push("d:1", Script{.pieces = {kOk}, .hold = true});
  fake_->Push("e:1", Script{.pieces = {kOk}, .hold = true});
  TestClient c(router_->port());
  c.Write("POST", "/v1/completions", Completion(64));
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  EXPECT_TRUE(WaitFor([&] { return router_->ActiveBlocks({"p:1", 0}) == 0; }));
  EXPECT_EQ(router_->PendingGuards(), 1u);
  EXPECT_EQ(router_->PendingDemandReservations(), 1u);
  fake_->Release();
  EXPECT_EQ(c.ReadAnswer().status, 200);
}

}  // namespace
}  // namespace infera::router
