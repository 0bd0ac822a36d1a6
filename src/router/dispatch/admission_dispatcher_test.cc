// The admission queue in-process (admission_dispatcher.h): the whole router with
// --admission-queue on, a FakeUpstream whose first exchange holds before its head (its
// prefill stays pending), and the test's clock for Expire.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "router/router_test_support.h"

namespace infera::router {
namespace {

constexpr int64_t kQueueMs = 1'000'000;
// About 100 tokens (bytes / 4): 6 blocks of 16 pending while held.
const std::string kQueuePrompt(400, 'x');
const std::string kQueueBody =
    R"({"model":"m","max_tokens":2,"messages":[{"role":"user","content":")" + kQueuePrompt +
    R"("}]})";
constexpr char kQueueOk[] = R"({"id":"x","object":"chat.completion","choices":[]})";

class AdmissionDispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void Start(int64_t request_timeout_ms = 600'000) {
    RouterOptions opt;
    opt.request_timeout_ms = request_timeout_ms;
    opt.admission.enabled = true;
    opt.admission.threshold_blocks = 1;
    opt.admission.queue.max_queued = 2;
    opt.admission.queue.max_wait_ns = 5'000 * kQueueMs;
    router_ = testing::StartTestRouter(std::move(opt), clock_, 42, &fake_);
    ASSERT_TRUE(router_);
  }
  // A mixed worker "a:1" whose first exchange holds before its head.
  void AddMixed() {
    router_->AddWorker(testing::WorkerRecordOf("a"));
    fake_->Push("a:1", Script{.pieces = {kQueueOk}, .hold_before_head = true});
    fake_->Push("a:1", Script{.pieces = {kQueueOk}});
  }
  std::string Metrics() const { return router_->RenderMetrics(); }
  bool Has(const std::string& text) const { return Metrics().find(text) != std::string::npos; }
  std::unique_ptr<TestClient> Send(const std::string& headers = "") {
    auto c = std::make_unique<TestClient>(router_->port());
    c->Write("POST", "/v1/chat/completions", kQueueBody, headers);
    return c;
  }
  bool Depth(int n, const std::string& pool = "m|mixed") const {
    return Has("infera_router_queue_depth{pool=\"" + pool + "\"} " + std::to_string(n) + "\n");
  }

  TestClock clock_;
  FakeUpstream* fake_ = nullptr;
  std::unique_ptr<Router> router_;
};

TEST_F(AdmissionDispatcherTest, HoldsWhileSaturatedAndBindsWhenTheWorkerFrees) {
  AddMixed();
  auto first = Send();
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  EXPECT_TRUE(Has(R"(infera_router_queue_admitted_total{outcome="bind_now"} 1)"));
  auto second = Send();
  ASSERT_TRUE(WaitFor([&] { return Depth(1); }));
  EXPECT_EQ(fake_->sent().size(), 1u);  // held: not sent
  EXPECT_EQ(router_->PendingGuards(), 1u);
  fake_->Release();  // the first ends: its guard's release drains the queue
  EXPECT_EQ(first->ReadAnswer().status, 200);
  EXPECT_EQ(second->ReadAnswer().status, 200);
  EXPECT_EQ(fake_->sent().size(), 2u);
  EXPECT_TRUE(Depth(0));
  EXPECT_TRUE(Has("infera_router_queue_wait_seconds_count 1\n"));
  EXPECT_TRUE(WaitFor([&] { return router_->PendingGuards() == 0; }));
}

TEST_F(AdmissionDispatcherTest, FullExpiredCancelledAndBadPriority) {
  AddMixed();
  auto first = Send();
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  Answer bad = Send("X-Infera-Priority: 1x\r\n")->ReadAnswer();
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("X-Infera-Priority"), std::string::npos) << bad.body;

  auto gone = Send();
  ASSERT_TRUE(WaitFor([&] { return Depth(1); }));
  gone->Abort();  // the client leaves while queued: nothing was held for it
  ASSERT_TRUE(WaitFor([&] { return Has("infera_router_queue_cancelled_total 1\n"); }));
  EXPECT_TRUE(Depth(0));
  EXPECT_EQ(router_->PendingGuards(), 1u);

  auto waiting = Send();
  auto also = Send();
  ASSERT_TRUE(WaitFor([&] { return Depth(2); }));
  Answer full = Send()->ReadAnswer();  // --queue-max 2
  EXPECT_EQ(full.status, 429);
  EXPECT_EQ(full.headers.Get("Retry-After"), "1");
  EXPECT_NE(full.body.find(R"("code":"queue_full")"), std::string::npos) << full.body;
  EXPECT_NE(full.body.find(R"("type":"rate_limit_error")"), std::string::npos) << full.body;

  clock_.Advance(5'000 * kQueueMs);  // both waited --queue-max-wait-s: the next tick drops them
  for (auto* c : {waiting.get(), also.get()}) {
    Answer expired = c->ReadAnswer();
    EXPECT_EQ(expired.status, 429);
    EXPECT_NE(expired.body.find(R"("code":"queue_timeout")"), std::string::npos) << expired.body;
    EXPECT_FALSE(expired.headers.Get("Retry-After").empty());
  }
  EXPECT_TRUE(Has(R"(infera_router_queue_rejected_total{reason="full"} 1)"));
  EXPECT_TRUE(Has(R"(infera_router_queue_rejected_total{reason="timeout"} 2)"));
  EXPECT_TRUE(Depth(0));
  EXPECT_EQ(fake_->sent().size(), 1u);
  fake_->Release();
  EXPECT_EQ(first->ReadAnswer().status, 200);
  EXPECT_TRUE(WaitFor([&] { return router_->PendingGuards() == 0; }));
}

// --request-timeout-ms passing while queued (in real time: the waiter's timer) is 504.
TEST_F(AdmissionDispatcherTest, TheRequestTimeoutWhileQueuedIs504) {
  router_.reset();
  Start(/*request_timeout_ms=*/200);
  AddMixed();
  auto first = Send();
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 1; }));
  auto second = Send();
  Answer late = second->ReadAnswer();
  EXPECT_EQ(late.status, 504);
  EXPECT_NE(late.body.find("admission queue"), std::string::npos) << late.body;
  EXPECT_TRUE(Depth(0));
  EXPECT_TRUE(Has(R"(infera_router_queue_admitted_total{outcome="queued"} 1)"));
  EXPECT_EQ(fake_->sent().size(), 1u);
  fake_->Release();
  EXPECT_EQ(first->ReadAnswer().status, 200);
  EXPECT_TRUE(WaitFor([&] { return router_->PendingGuards() == 0; }));
}

// A PD fleet queues in its prefill pool: held while the prefill worker prefills.
TEST_F(AdmissionDispatcherTest, PdRequestsQueueInThePrefillPool) {
  const auto protocol = discovery::PdProtocol::kVllmMooncake;  // concurrent legs
  router_->AddWorker(testing::PdWorkerRecord("p", discovery::DisaggMode::kPrefill, protocol));
  router_->AddWorker(testing::PdWorkerRecord("d", discovery::DisaggMode::kDecode, protocol));
  for (const char* host : {"p:1", "d:1"}) {
    fake_->Push(host, Script{.pieces = {kQueueOk}, .hold_before_head = true});
    fake_->Push(host, Script{.pieces = {kQueueOk}});
  }
  auto first = Send();
  ASSERT_TRUE(WaitFor([&] { return fake_->held() == 2; }));
  auto second = Send();
  ASSERT_TRUE(WaitFor([&] { return Depth(1, "m|prefill"); }));
  EXPECT_EQ(fake_->sent().size(), 2u);
  fake_->Release();
  EXPECT_EQ(first->ReadAnswer().status, 200);
  EXPECT_EQ(second->ReadAnswer().status, 200);
  EXPECT_EQ(fake_->sent().size(), 4u);
  EXPECT_TRUE(Depth(0, "m|prefill"));
  EXPECT_TRUE(WaitFor([&] { return router_->PendingGuards() == 0; }));
}

}  // namespace
}  // namespace infera::router
