// The whole router in-process: real http::Server on port 0, real pipeline, a
// FakeUpstream for the workers, a test clock and a fixed seed. Each test ends with
// the router's holds back to zero (pending guards, active blocks).
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>

#include "http/asio.h"
#include "router/fake_upstream.h"
#include "router/router.h"
#include "testing/wait_for.h"

namespace infera::router {
namespace {

using nlohmann::json;
using testing::WaitFor;
using tcp = asio::ip::tcp;

constexpr int64_t kMs = 1'000'000;

// A clock the test moves; readable from the router's loops.
class TestClock final : public core::Clock {
 public:
  int64_t NowNs() const override { return now_ns_.load(); }
  void Advance(int64_t delta_ns) { now_ns_.fetch_add(delta_ns); }

 private:
  std::atomic<int64_t> now_ns_{1'000'000'000};
};

struct Answer {
  int status = 0;
  http::Headers headers;
  std::string body;  // de-chunked
};

// One HTTP/1.1 exchange with Connection: close; reads until the server closes.
class TestClient {
 public:
  explicit TestClient(uint16_t port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  void Write(const std::string& method, const std::string& path, const std::string& body,
             const std::string& extra_headers = "") {
    std::string req =
        method + " " + path + " HTTP/1.1\r\nHost: router\r\nConnection: close\r\n" +
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n" + extra_headers + "\r\n" + body;
    asio::write(socket_, asio::buffer(req));
  }
  // Reads until `needle` appeared in the raw bytes (or the server closed).
  std::string ReadUntil(const std::string& needle) {
    char buf[4096];
    boost::system::error_code ec;
    while (raw_.find(needle) == std::string::npos) {
      size_t n = socket_.read_some(asio::buffer(buf), ec);
      if (ec) break;
      raw_.append(buf, n);
    }
    return raw_;
  }
  Answer ReadAnswer() {
    ReadUntil("\x01never");
    Answer a;
    size_t head_end = raw_.find("\r\n\r\n");
    if (head_end == std::string::npos) return a;
    std::string head = raw_.substr(0, head_end);
    a.status = std::atoi(head.c_str() + 9);
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos && pos < head.size()) {
      size_t next = head.find("\r\n", pos + 2);
      std::string line =
          head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        a.headers.Add(line.substr(0, colon), line.substr(colon + 2));
      }
      pos = next;
    }
    std::string body = raw_.substr(head_end + 4);
    if (a.headers.Get("Transfer-Encoding") == "chunked") {
      size_t p = 0;
      while (p < body.size()) {
        size_t eol = body.find("\r\n", p);
        if (eol == std::string::npos) break;
        size_t len = std::stoul(body.substr(p, eol - p), nullptr, 16);
        if (len == 0) break;
        a.body += body.substr(eol + 2, len);
        p = eol + 2 + len + 2;
      }
    } else {
      a.body = body;
    }
    return a;
  }
  // Resets the connection (RST), as a client that crashed.
  void Abort() {
    socket_.set_option(asio::socket_base::linger(true, 0));
    socket_.close();
  }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  std::string raw_;
};

const char kChat[] = R"({"model":"m","messages":[{"role":"user","content":"hello"}]})";
const char kChatStream[] =
    R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]})";
const char kCompletion[] = R"({"choices":[{"index":0,"text":"ok"}]})";

std::string Sse(const std::string& content) {
  return "data: " +
         json({{"choices", {{{"index", 0}, {"delta", {{"content", content}}}}}}}).dump() + "\n\n";
}

class RouterPipelineTest : public ::testing::Test {
 protected:
  void StartRouter(RouterOptions opt = {}) {
    opt.threads = 1;
    opt.server.host = "127.0.0.1";
    opt.server.port = 0;
    opt.kv_events = false;
    if (!policy_set_) opt.policy.policy = core::Policy::kRoundRobin;
    RouterEnv env;
    env.clock = &clock_;
    env.seed = 42;
    env.upstream = [this](http::IoPool&, const core::Clock& clock) {
      auto fake = std::make_unique<FakeUpstream>(clock);
      fake_ = fake.get();
      return std::unique_ptr<Upstream>(std::move(fake));
    };
    router_ = std::make_unique<Router>(opt, std::move(env));
    ASSERT_TRUE(router_->Start().ok());
  }
  void AddWorker(const std::string& host) {
    discovery::WorkerRecord r;
    r.worker_id = host + ":1";
    r.url = "http://" + host + ":1";
    r.model_name = "m";
    router_->AddWorker(r);
  }
  void TearDown() override {
    if (router_) {
      // No hold survives a request, whatever way it ended.
      EXPECT_TRUE(WaitFor([&] { return router_->PendingGuards() == 0; }));
      EXPECT_EQ(router_->ActiveBlocks({"a:1", 0}), 0u);
      EXPECT_EQ(router_->ActiveBlocks({"b:1", 0}), 0u);
      router_->Shutdown();
    }
  }
  Answer Call(const std::string& method, const std::string& path, const std::string& body = "") {
    TestClient c(router_->port());
    c.Write(method, path, body);
    return c.ReadAnswer();
  }
  std::string Metrics() { return Call("GET", "/metrics").body; }
  std::string BreakerState(const std::string& worker_id) {
    json workers = json::parse(Call("GET", "/v1/workers").body);
    for (const auto& w : workers["workers"]) {
      if (w["worker_id"] == worker_id) return w["breaker_state"];
    }
    return "";
  }

  TestClock clock_;
  bool policy_set_ = false;
  std::unique_ptr<Router> router_;
  FakeUpstream* fake_ = nullptr;
};

TEST_F(RouterPipelineTest, PickHoldsActiveBlocksUntilTheAnswerEnds) {
  policy_set_ = true;  // kv-aware: the request's token blocks are held while it runs
  StartRouter();
  AddWorker("a");
  fake_->Push("a:1", Script{.pieces = {kCompletion}, .hold = true});
  std::string prompt = "[";
  for (int i = 0; i < 64; ++i) prompt += (i ? "," : "") + std::to_string(i + 1);
  prompt += "]";
  TestClient c(router_->port());
  c.Write("POST", "/v1/completions", R"({"model":"m","prompt":)" + prompt + "}");
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  EXPECT_EQ(router_->PendingGuards(), 1u);
  EXPECT_EQ(router_->ActiveBlocks({"a:1", 0}), 4u);  // 64 tokens / 16
  fake_->Release();
  Answer a = c.ReadAnswer();
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, kCompletion);
  EXPECT_EQ(a.headers.Get("X-Infera-Worker-Id"), "a:1");
  EXPECT_EQ(a.headers.Get("X-Infera-Request-Id").size(), 24u);
  ASSERT_EQ(fake_->sent().size(), 1u);
  EXPECT_EQ(fake_->sent()[0].path, "/v1/completions");
  EXPECT_TRUE(WaitFor([&] { return router_->ActiveBlocks({"a:1", 0}) == 0; }));
}

std::string Tokens(int n) {
  std::string prompt = "[";
  for (int i = 0; i < n; ++i) prompt += (i ? "," : "") + std::to_string(i + 1);
  return prompt + "]";
}

TEST_F(RouterPipelineTest, ThePrefillStopsPendingAtTheStreamsFirstByte) {
  policy_set_ = true;  // kv-aware, load term work: the pick's missed blocks are pending
  StartRouter();
  AddWorker("a");
  const std::string body = R"({"model":"m","stream":true,"prompt":)" + Tokens(64) + "}";
  // The head arrived, no body byte yet: the prefill is still pending.
  fake_->Push("a:1", Script{.content_type = "text/event-stream", .hold = true});
  // The first chunk arrived: the request is decoding.
  fake_->Push("a:1",
              Script{.content_type = "text/event-stream", .pieces = {Sse("Hel")}, .hold = true});
  {
    TestClient c(router_->port());
    c.Write("POST", "/v1/completions", body);
    ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
    EXPECT_EQ(router_->PendingPrefillBlocks({"a:1", 0}), 4.0);  // 64 tokens, nothing cached
    EXPECT_EQ(router_->ActiveBlocks({"a:1", 0}), 4u);
    fake_->Release();
    EXPECT_EQ(c.ReadAnswer().status, 200);
  }
  EXPECT_TRUE(WaitFor([&] { return router_->PendingGuards() == 0; }));
  EXPECT_EQ(router_->PendingPrefillBlocks({"a:1", 0}), 0.0);  // released with the guard
  {
    TestClient c(router_->port());
    c.Write("POST", "/v1/completions", body);
    c.ReadUntil("Hel");
    ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
    EXPECT_EQ(router_->PendingPrefillBlocks({"a:1", 0}), 0.0);
    EXPECT_EQ(router_->ActiveBlocks({"a:1", 0}), 4u);  // held until the last token
    fake_->Release();
    EXPECT_EQ(c.ReadAnswer().status, 200);
  }
}

TEST_F(RouterPipelineTest, ReportedCachedTokensAreComparedWithThePrediction) {
  policy_set_ = true;  // kv-aware: the pick predicts the worker's cached tokens
  StartRouter();
  AddWorker("a");
  const std::string prompt = Tokens(64);
  // Nothing in the router's view: each answer predicts 0 cached tokens. The worker
  // reports 48 (whole body), then 32 (a stream's usage chunk, split across two reads),
  // then nothing.
  fake_->Push("a:1", Script{.pieces = {R"({"choices":[{"index":0,"text":"ok"}],)"
                                       R"("usage":{"prompt_tokens":64,"completion_tokens":1,)"
                                       R"("prompt_tokens_details":{"cached_tokens":48}}})"}});
  fake_->Push("a:1",
              Script{.content_type = "text/event-stream",
                     .pieces = {Sse("Hel"), R"(data: {"choices":[],"usage":{"prompt_tokens":64,)",
                                R"("prompt_tokens_details":{"cached_tokens":32}}})"
                                "\n\ndata: [DONE]\n\n"}});
  fake_->Push("a:1", Script{.pieces = {kCompletion}});
  const std::string whole = R"({"model":"m","prompt":)" + prompt + "}";
  const std::string stream =
      R"({"model":"m","stream":true,"stream_options":{"include_usage":true},"prompt":)" + prompt +
      "}";
  EXPECT_EQ(Call("POST", "/v1/completions", whole).status, 200);
  EXPECT_EQ(Call("POST", "/v1/completions", stream).status, 200);
  EXPECT_EQ(Call("POST", "/v1/completions", whole).status, 200);
  json workers = json::parse(Call("GET", "/v1/workers").body);
  json p = workers["workers"][0]["targets"][0]["prediction"];
  EXPECT_EQ(p["samples"], 2);  // the answer without usage is no sample
  EXPECT_EQ(p["predicted_tokens"], 0);
  EXPECT_EQ(p["reported_tokens"], 80);
  EXPECT_EQ(p["relative_error"], 1.0);
  EXPECT_EQ(p["drifting"], false);  // fewer than 8 answers
  EXPECT_EQ(workers["workers"][0]["prediction_drifting"], false);
  std::string m = Metrics();
  EXPECT_NE(m.find(R"(infera_router_prediction_samples_total{worker_id="a:1"} 2)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(R"(infera_router_prediction_reported_tokens_total{worker_id="a:1"} 80)"),
            std::string::npos);
  EXPECT_NE(m.find(R"(infera_router_prediction_relative_error{worker_id="a:1"} 1)"),
            std::string::npos);
  EXPECT_NE(m.find(R"(infera_router_prediction_drifting{worker_id="a:1"} 0)"), std::string::npos);
}

TEST_F(RouterPipelineTest, FivexxBeforeTheFirstByteFailsOver) {
  StartRouter();
  AddWorker("a");
  AddWorker("b");
  fake_->Push("a:1", Script{.status = 503, .pieces = {R"({"error":{"message":"busy"}})"}});
  fake_->Push("b:1", Script{.pieces = {kCompletion}});
  Answer a = Call("POST", "/v1/chat/completions", kChat);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.headers.Get("X-Infera-Worker-Id"), "b:1");
  ASSERT_EQ(fake_->sent().size(), 2u);
  EXPECT_EQ(fake_->sent()[0].host_port, "a:1");
  EXPECT_EQ(fake_->sent()[1].host_port, "b:1");
  std::string m = Metrics();
  EXPECT_NE(m.find(R"(infera_router_failovers_total{worker_id="b:1"} 1)"), std::string::npos);
  EXPECT_NE(m.find(R"(infera_router_upstream_errors_total{worker_id="a:1",kind="status_5xx"} 1)"),
            std::string::npos);
}

TEST_F(RouterPipelineTest, EveryWorkerFailingIs502WithTheLastMessage) {
  StartRouter();
  AddWorker("a");
  AddWorker("b");
  fake_->Push("a:1", Script{.send_error = absl::UnavailableError("connection refused")});
  fake_->Push("b:1", Script{.status = 500, .pieces = {R"({"error":{"message":"oom"}})"}});
  Answer a = Call("POST", "/v1/chat/completions", kChat);
  EXPECT_EQ(a.status, 502);
  EXPECT_NE(a.body.find("worker b:1 answered 500: oom"), std::string::npos) << a.body;
}

TEST_F(RouterPipelineTest, FailureAfterTheFirstByteIsAnSseErrorEvent) {
  StartRouter();
  AddWorker("a");
  AddWorker("b");
  fake_->Push("a:1", Script{.content_type = "text/event-stream",
                            .pieces = {Sse("Hel")},
                            .read_error = absl::UnavailableError("connection reset")});
  Answer a = Call("POST", "/v1/chat/completions", kChatStream);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body.find(Sse("Hel")), 0u);
  EXPECT_NE(a.body.find("data: {\"error\""), std::string::npos) << a.body;
  EXPECT_NE(a.body.find("worker a:1 failed mid-stream"), std::string::npos);
  EXPECT_EQ(fake_->sent().size(), 1u);  // no failover after the first byte
  EXPECT_NE(Metrics().find(R"(outcome="upstream_error"} 1)"), std::string::npos);
}

TEST_F(RouterPipelineTest, ClientDisconnectCancelsTheUpstream) {
  StartRouter();
  AddWorker("a");
  fake_->Push("a:1",
              Script{.content_type = "text/event-stream", .pieces = {Sse("Hel")}, .hold = true});
  {
    TestClient c(router_->port());
    c.Write("POST", "/v1/chat/completions", kChatStream);
    c.ReadUntil("Hel");
    c.Abort();
  }
  EXPECT_TRUE(WaitFor([&] { return fake_->cancelled() == 1; }));
  EXPECT_TRUE(WaitFor(
      [&] { return Metrics().find(R"(endpoint="chat",status="499"} 1)") != std::string::npos; }));
}

TEST_F(RouterPipelineTest, DeadlineIs504WithoutFailover) {
  RouterOptions opt;
  opt.request_timeout_ms = 1000;
  StartRouter(opt);
  AddWorker("a");
  AddWorker("b");
  fake_->Push("a:1", Script{.hold_before_head = true});
  TestClient c(router_->port());
  c.Write("POST", "/v1/chat/completions", kChat);
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  EXPECT_EQ(fake_->sent()[0].deadline_ns, clock_.NowNs() + 1000 * kMs);
  clock_.Advance(999 * kMs);
  fake_->Expire();  // not yet due
  EXPECT_EQ(fake_->held(), 1);
  clock_.Advance(1 * kMs);
  fake_->Expire();
  Answer a = c.ReadAnswer();
  EXPECT_EQ(a.status, 504);
  EXPECT_NE(a.body.find("did not answer within 1000 ms"), std::string::npos) << a.body;
  EXPECT_EQ(fake_->sent().size(), 1u);
}

TEST_F(RouterPipelineTest, BreakerOpensThenHalfOpenProbeClosesIt) {
  RouterOptions opt;
  opt.breaker_failures = 2;
  opt.breaker_cooldown_ms = 5000;
  StartRouter(opt);
  AddWorker("a");
  fake_->Push("a:1", Script{.status = 502});
  fake_->Push("a:1", Script{.status = 502});
  fake_->Push("a:1", Script{.status = 502});  // the first half-open probe fails
  fake_->Push("a:1", Script{.pieces = {kCompletion}});
  EXPECT_EQ(Call("POST", "/v1/chat/completions", kChat).status, 502);
  EXPECT_EQ(BreakerState("a:1"), "closed");
  EXPECT_EQ(Call("POST", "/v1/chat/completions", kChat).status, 502);
  EXPECT_EQ(BreakerState("a:1"), "open");
  Answer refused = Call("POST", "/v1/chat/completions", kChat);
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("all circuit breakers open"), std::string::npos);
  EXPECT_EQ(fake_->sent().size(), 2u);

  clock_.Advance(5000 * kMs);  // cooldown over: one probe
  EXPECT_EQ(Call("POST", "/v1/chat/completions", kChat).status, 502);
  EXPECT_EQ(BreakerState("a:1"), "open");  // the probe failed: open again
  EXPECT_EQ(Call("POST", "/v1/chat/completions", kChat).status, 503);
  clock_.Advance(5000 * kMs);
  EXPECT_EQ(Call("POST", "/v1/chat/completions", kChat).status, 200);
  EXPECT_EQ(BreakerState("a:1"), "closed");
  EXPECT_EQ(fake_->sent().size(), 4u);
}

TEST_F(RouterPipelineTest, HalfOpenAdmitsOneProbeAtATime) {
  RouterOptions opt;
  opt.breaker_failures = 1;
  opt.breaker_cooldown_ms = 100;
  StartRouter(opt);
  AddWorker("a");
  fake_->Push("a:1", Script{.status = 500});
  fake_->Push("a:1", Script{.pieces = {kCompletion}, .hold_before_head = true});
  EXPECT_EQ(Call("POST", "/v1/chat/completions", kChat).status, 502);
  clock_.Advance(100 * kMs);
  TestClient probe(router_->port());
  probe.Write("POST", "/v1/chat/completions", kChat);
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  EXPECT_EQ(BreakerState("a:1"), "half_open");
  // The probe is in flight: nothing else is admitted.
  EXPECT_EQ(Call("POST", "/v1/chat/completions", kChat).status, 503);
  fake_->Release();
  EXPECT_EQ(probe.ReadAnswer().status, 200);
  EXPECT_EQ(BreakerState("a:1"), "closed");
}

TEST_F(RouterPipelineTest, AnthropicMessagesAreTranslatedBothWays) {
  StartRouter();
  AddWorker("a");
  fake_->Push("a:1", Script{.pieces = {R"({"id":"c1","choices":[{"index":0,"message":)"
                                       R"({"role":"assistant","content":"Hi there"},)"
                                       R"("finish_reason":"stop"}],)"
                                       R"("usage":{"prompt_tokens":7,"completion_tokens":2}})"}});
  Answer a = Call("POST", "/v1/messages",
                  R"({"model":"m","max_tokens":16,"system":"be brief",)"
                  R"("messages":[{"role":"user","content":"hello"}]})");
  ASSERT_EQ(a.status, 200) << a.body;
  json msg = json::parse(a.body);
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["content"][0]["text"], "Hi there");
  EXPECT_EQ(msg["stop_reason"], "end_turn");
  EXPECT_EQ(msg["usage"]["input_tokens"], 7);
  ASSERT_EQ(fake_->sent().size(), 1u);
  EXPECT_EQ(fake_->sent()[0].path, "/v1/chat/completions");
  json up = json::parse(fake_->sent()[0].body);
  EXPECT_EQ(up["messages"][0]["role"], "system");
  EXPECT_EQ(up["messages"][0]["content"], "be brief");
  EXPECT_EQ(up["max_tokens"], 16);
}

TEST_F(RouterPipelineTest, AnthropicStreamAndErrorsKeepTheirShape) {
  StartRouter();
  AddWorker("a");
  fake_->Push("a:1", Script{.content_type = "text/event-stream",
                            .pieces = {Sse("Hel"), Sse("lo"), "data: [DONE]\n\n"}});
  fake_->Push("a:1", Script{.status = 400, .pieces = {R"({"error":{"message":"too long"}})"}});
  Answer s = Call("POST", "/v1/messages",
                  R"({"model":"m","max_tokens":16,"stream":true,)"
                  R"("messages":[{"role":"user","content":"hello"}]})");
  EXPECT_EQ(s.status, 200);
  EXPECT_NE(s.body.find("event: message_start"), std::string::npos) << s.body;
  EXPECT_NE(s.body.find(R"("text":"Hel")"), std::string::npos);
  EXPECT_NE(s.body.find("event: message_stop"), std::string::npos);
  Answer e = Call("POST", "/v1/messages",
                  R"({"model":"m","max_tokens":16,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(e.status, 400);
  json err = json::parse(e.body);
  EXPECT_EQ(err["type"], "error");
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_EQ(err["error"]["message"], "too long");
}

TEST_F(RouterPipelineTest, BadInputAndUnknownModelNeverReachAWorker) {
  StartRouter();
  AddWorker("a");
  EXPECT_EQ(Call("POST", "/v1/chat/completions", "{nope").status, 400);
  Answer unknown = Call("POST", "/v1/chat/completions",
                        R"({"model":"other","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(json::parse(unknown.body)["error"]["code"], "model_not_found");
  EXPECT_TRUE(fake_->sent().empty());
}

TEST_F(RouterPipelineTest, DataParallelRankIsSetPerTarget) {
  StartRouter();
  discovery::WorkerRecord r;
  r.worker_id = "a:1";
  r.url = "http://a:1";
  r.model_name = "m";
  r.dp_size = 2;
  router_->AddWorker(r);
  EXPECT_EQ(Call("POST", "/v1/chat/completions", kChat).status, 200);
  EXPECT_EQ(Call("POST", "/v1/chat/completions", kChat).status, 200);
  ASSERT_EQ(fake_->sent().size(), 2u);
  EXPECT_EQ(json::parse(fake_->sent()[0].body)["data_parallel_rank"], 0);
  EXPECT_EQ(json::parse(fake_->sent()[1].body)["data_parallel_rank"], 1);
}

}  // namespace
}  // namespace infera::router
