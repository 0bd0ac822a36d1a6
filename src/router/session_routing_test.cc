// --session-affinity in-process (doc/session-affinity.md): the whole router (real
// server on port 0, real pipeline), a FakeUpstream for the workers, a test clock.
// The policy is round-robin, so without a binding consecutive requests move on:
// a request that stays is the binding at work. Each test ends with every hold
// released.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "router/dispatch/fake_upstream.h"
#include "router/router.h"
#include "router/router_test_support.h"
#include "testing/wait_for.h"

namespace infera::router {
namespace {

using nlohmann::json;

constexpr int64_t kSecond = 1'000'000'000;

// A chat body naming its session in `field` (session_id, prompt_cache_key; "" none).
std::string Chat(const std::string& field = "", const std::string& session = "",
                 const std::string& text = "hello") {
  json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", text}}}}};
  if (!field.empty()) body[field] = session;
  return body.dump();
}

class SessionRoutingTest : public ::testing::Test {
 protected:
  void StartRouter(core::SessionMode mode, RouterOptions opt = {}) {
    opt.policy.policy = core::Policy::kRoundRobin;
    opt.sessions.mode = mode;
    router_ = testing::StartTestRouter(std::move(opt), clock_, 11, &fake_);
    ASSERT_TRUE(router_);
  }
  void AddWorker(const std::string& host,
                 discovery::DisaggMode mode = discovery::DisaggMode::kMixed) {
    discovery::WorkerRecord r = testing::WorkerRecordOf(host);
    r.disagg_mode = mode;
    if (mode != discovery::DisaggMode::kMixed) {
      r.pd_protocol = discovery::PdProtocol::kSglangBootstrap;
      r.disagg_protocol = "sglang-bootstrap";
    }
    if (mode == discovery::DisaggMode::kPrefill) {
      r.pd.bootstrap_host = host;
      r.pd.bootstrap_port = 8998;
    }
    router_->AddWorker(r);  // unscripted: it answers 200
    hosts_.push_back(r.worker_id);
  }
  // Prefill workers p0, p1 and decode workers d0, d1.
  void StartPdFleet(core::SessionMode mode) {
    StartRouter(mode);
    for (const char* h : {"p0", "p1"}) AddWorker(h, discovery::DisaggMode::kPrefill);
    for (const char* h : {"d0", "d1"}) AddWorker(h, discovery::DisaggMode::kDecode);
  }
  void TearDown() override {
    if (router_) {
      EXPECT_TRUE(WaitFor([&] { return router_->PendingGuards() == 0; }));
      for (const std::string& t : hosts_) EXPECT_EQ(router_->ActiveBlocks({t, 0}), 0u) << t;
      router_->Shutdown();
    }
  }
  Answer Post(const std::string& body, const std::string& headers = "") {
    TestClient c(router_->port());
    c.Write("POST", "/v1/chat/completions", body, headers);
    return c.ReadAnswer();
  }
  // The worker that answered (the decode worker of a PD pair).
  std::string Served(const std::string& body, const std::string& headers = "") {
    Answer a = Post(body, headers);
    EXPECT_EQ(a.status, 200) << a.body;
    return std::string(a.headers.Get("X-Infera-Worker-Id"));
  }
  // The host_port of every request sent since `from`, in order.
  std::vector<std::string> SentSince(size_t from) {
    std::vector<std::string> out;
    const auto sent = fake_->sent();
    for (size_t i = from; i < sent.size(); ++i) out.push_back(sent[i].host_port);
    return out;
  }
  std::string Metrics() {
    TestClient c(router_->port());
    c.Write("GET", "/metrics", "");
    return c.ReadAnswer().body;
  }
  bool HasMetric(const std::string& line) {
    const std::string m = Metrics();
    const bool found = m.find(line + "\n") != std::string::npos;
    if (!found) ADD_FAILURE() << "no '" << line << "' in\n" << m;
    return found;
  }

  TestClock clock_;
  std::unique_ptr<Router> router_;
  FakeUpstream* fake_ = nullptr;
  std::vector<std::string> hosts_;
};

TEST_F(SessionRoutingTest, OffByDefaultTheSessionIsIgnored) {
  StartRouter(RouterOptions{}.sessions.mode);
  for (const char* h : {"a", "b", "c"}) AddWorker(h);
  std::vector<std::string> served;
  for (int i = 0; i < 3; ++i) served.push_back(Served(Chat("session_id", "s1")));
  EXPECT_NE(served[0], served[1]);  // round-robin moves on
  EXPECT_NE(served[1], served[2]);
  HasMetric("infera_router_session_affinity_sessions 0");
  HasMetric(R"(infera_router_session_affinity_binds_total{slot="prefill"} 0)");
}

TEST_F(SessionRoutingTest, EachKeySourceKeepsItsSessionOnOneWorker) {
  StartRouter(core::SessionMode::kPrefill);
  for (const char* h : {"a", "b", "c"}) AddWorker(h);
  const std::string s1 = Served(Chat("session_id", "s1"));
  const std::string s2 = Served(Chat("prompt_cache_key", "s2"));
  const std::string s3 = Served(Chat(), "X-Session-Id: s3\r\n");
  for (int i = 0; i < 4; ++i) {
    const std::string text = "turn " + std::to_string(i);
    EXPECT_EQ(Served(Chat("session_id", "s1", text)), s1) << i;
    EXPECT_EQ(Served(Chat("prompt_cache_key", "s2", text)), s2) << i;
    EXPECT_EQ(Served(Chat("", "", text), "X-Session-Id: s3\r\n"), s3) << i;
    // A request without a session still rotates.
    const std::string free1 = Served(Chat());
    EXPECT_NE(Served(Chat()), free1);
  }
  // The body's session_id wins over the header.
  EXPECT_EQ(Served(Chat("session_id", "s1"), "X-Session-Id: s3\r\n"), s1);
  HasMetric("infera_router_session_affinity_sessions 3");
  HasMetric(R"(infera_router_session_affinity_binds_total{slot="prefill"} 3)");
  HasMetric(R"(infera_router_session_affinity_hits_total{slot="prefill"} 13)");
  HasMetric(R"(infera_router_session_affinity_rebinds_total{slot="prefill"} 0)");
}

TEST_F(SessionRoutingTest, TheSameSessionUnderAnotherModelIsAnotherSession) {
  StartRouter(core::SessionMode::kPrefill);
  AddWorker("a");
  AddWorker("b");
  Served(Chat("session_id", "s1"));
  json other = json::parse(Chat("session_id", "s1"));
  other["model"] = "m2";  // no worker serves it: 404, and no binding
  EXPECT_EQ(Post(other.dump()).status, 404);
  HasMetric("infera_router_session_affinity_sessions 1");
}

TEST_F(SessionRoutingTest, AWorkerLeavingIsReplacedAndTheNewBindingHolds) {
  StartRouter(core::SessionMode::kPrefill);
  for (const char* h : {"a", "b", "c"}) AddWorker(h);
  const std::string first = Served(Chat("session_id", "s1"));
  router_->RemoveWorker(first);
  const std::string second = Served(Chat("session_id", "s1"));
  EXPECT_NE(second, first);
  // The old worker comes back (a new target): the session stays where it went.
  AddWorker(first.substr(0, first.find(':')));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Served(Chat("session_id", "s1")), second);
  HasMetric(R"(infera_router_session_affinity_rebinds_total{slot="prefill"} 1)");
  HasMetric(R"(infera_router_session_affinity_hits_total{slot="prefill"} 3)");
}

TEST_F(SessionRoutingTest, AFailingOrBrokenBoundWorkerIsReplaced) {
  StartRouter(core::SessionMode::kPrefill, testing::BreakerAfter(1, 60'000));
  for (const char* h : {"a", "b", "c"}) AddWorker(h);
  // Three sessions, one per worker (round-robin binds them in turn).
  const std::string s1 = Served(Chat("session_id", "s1"));
  const std::string s2 = Served(Chat("session_id", "s2"));
  const std::string s3 = Served(Chat("session_id", "s3"));
  ASSERT_NE(s1, s2);
  ASSERT_NE(s2, s3);
  ASSERT_NE(s1, s3);
  // s1's worker fails: the request fails over and s1 is rebound there.
  fake_->Push(s1, Script{.status = 500, .pieces = {R"({"error":{"message":"oom"}})"}});
  size_t from = fake_->sent().size();
  const std::string moved = Served(Chat("session_id", "s1"));
  EXPECT_NE(moved, s1);
  EXPECT_EQ(SentSince(from), (std::vector<std::string>{s1, moved}));
  EXPECT_EQ(Served(Chat("session_id", "s1")), moved);
  // The other sessions stay where they are; a new one avoids the open breaker.
  EXPECT_NE(Served(Chat("session_id", "s4")), s1);
  from = fake_->sent().size();
  EXPECT_EQ(Served(Chat("session_id", "s2")), s2);
  EXPECT_EQ(Served(Chat("session_id", "s3")), s3);
  EXPECT_EQ(SentSince(from), (std::vector<std::string>{s2, s3}));
  HasMetric(R"(infera_router_session_affinity_rebinds_total{slot="prefill"} 1)");
}

TEST_F(SessionRoutingTest, AnOpenBreakerReplacesTheBindingWithoutTryingTheWorker) {
  StartRouter(core::SessionMode::kPrefill, testing::BreakerAfter(1, 60'000));
  AddWorker("a");
  AddWorker("b");
  const std::string s1 = Served(Chat("session_id", "s1"));
  const std::string other = s1 == "a:1" ? "b:1" : "a:1";
  // A request without a session fails on s1's worker (round-robin sends it there
  // next after one on the other): its breaker opens.
  fake_->Push(s1, Script{.status = 500, .pieces = {R"({"error":{"message":"oom"}})"}});
  size_t from = fake_->sent().size();
  Served(Chat());
  Served(Chat());
  std::vector<std::string> sent = SentSince(from);
  ASSERT_EQ(sent.size(), 3u);  // one request failed over from s1's worker
  from = fake_->sent().size();
  EXPECT_EQ(Served(Chat("session_id", "s1")), other);
  EXPECT_EQ(SentSince(from), std::vector<std::string>{other});  // never tried
  EXPECT_EQ(Served(Chat("session_id", "s1")), other);
  HasMetric(R"(infera_router_session_affinity_rebinds_total{slot="prefill"} 1)");
  HasMetric(R"(infera_router_session_affinity_hits_total{slot="prefill"} 1)");
}

TEST_F(SessionRoutingTest, UnusedSessionsExpireAndAFullTableEvictsTheOldest) {
  RouterOptions opt;
  opt.sessions.ttl_ns = 10 * kSecond;
  opt.sessions.max_sessions = 2;
  StartRouter(core::SessionMode::kPrefill, opt);
  AddWorker("a");
  AddWorker("b");
  Served(Chat("session_id", "s1"));
  Served(Chat("session_id", "s2"));
  Served(Chat("session_id", "s3"));  // evicts s1
  HasMetric("infera_router_session_affinity_sessions 2");
  HasMetric(R"(infera_router_session_affinity_evictions_total{reason="lru"} 1)");
  clock_.Advance(10 * kSecond);  // s2 and s3 unused for the TTL
  Served(Chat("session_id", "s4"));
  HasMetric("infera_router_session_affinity_sessions 1");
  HasMetric(R"(infera_router_session_affinity_evictions_total{reason="ttl"} 2)");
  HasMetric(R"(infera_router_session_affinity_binds_total{slot="prefill"} 4)");
}

TEST_F(SessionRoutingTest, PdPrefillModeKeepsThePrefillWorkerAndBalancesDecode) {
  StartPdFleet(core::SessionMode::kPrefill);
  size_t from = fake_->sent().size();
  std::vector<std::string> decodes;
  for (int i = 0; i < 4; ++i) decodes.push_back(Served(Chat("session_id", "s1")));
  const std::vector<std::string> sent = SentSince(from);
  ASSERT_EQ(sent.size(), 8u);
  std::vector<std::string> prefills;
  for (const std::string& s : sent) {
    if (s[0] == 'p') prefills.push_back(s);
  }
  ASSERT_EQ(prefills.size(), 4u);
  for (const std::string& p : prefills) EXPECT_EQ(p, prefills[0]);
  EXPECT_NE(decodes[0], decodes[1]);  // decode rotates
  HasMetric(R"(infera_router_session_affinity_hits_total{slot="prefill"} 3)");
  HasMetric(R"(infera_router_session_affinity_binds_total{slot="decode"} 0)");
}

TEST_F(SessionRoutingTest, PdBothModeKeepsBothAndReplacesOnlyTheLeg) {
  StartPdFleet(core::SessionMode::kBoth);
  auto legs = [&](const std::string& body) {
    const size_t from = fake_->sent().size();
    const std::string decode = Served(body);
    std::string prefill;
    for (const std::string& s : SentSince(from)) {
      if (s[0] == 'p') prefill = s;
    }
    return std::make_pair(prefill, decode);
  };
  const auto s1 = legs(Chat("session_id", "s1"));
  const auto s2 = legs(Chat("session_id", "s2"));
  EXPECT_NE(s1.first, s2.first);  // round-robin bound them apart
  EXPECT_NE(s1.second, s2.second);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(legs(Chat("session_id", "s1", "turn " + std::to_string(i))), s1);
    EXPECT_EQ(legs(Chat("session_id", "s2", "turn " + std::to_string(i))), s2);
  }
  // s1's decode worker leaves: only its decode leg moves; its prefill stays.
  router_->RemoveWorker(s1.second);
  const auto moved = legs(Chat("session_id", "s1"));
  EXPECT_EQ(moved.first, s1.first);
  EXPECT_EQ(moved.second, s2.second);  // the one decode worker left
  EXPECT_EQ(legs(Chat("session_id", "s1")), moved);
  // s2's prefill worker leaves: its prefill moves, its decode stays.
  router_->RemoveWorker(s2.first);
  const auto moved2 = legs(Chat("session_id", "s2"));
  EXPECT_EQ(moved2.first, s1.first);
  EXPECT_EQ(moved2.second, s2.second);
  HasMetric(R"(infera_router_session_affinity_rebinds_total{slot="decode"} 1)");
  HasMetric(R"(infera_router_session_affinity_rebinds_total{slot="prefill"} 1)");
  HasMetric(R"(infera_router_session_affinity_hits_total{slot="prefill"} 8)");
  HasMetric(R"(infera_router_session_affinity_hits_total{slot="decode"} 8)");
}

}  // namespace
}  // namespace infera::router
