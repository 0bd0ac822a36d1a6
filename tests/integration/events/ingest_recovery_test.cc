// Integration: a real ZMQ PUB + replay ROUTER in the test process publishes a realistic
// stream with deliberate gaps, duplicates, out-of-order messages, undecodable payloads
// and publisher restarts; the router's view must converge to the publisher's true
// block set (doc/kv-events.md "Recovery").
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "engine_events/event_encoder.h"
#include "engine_events/fake_engine_cache.h"
#include "engine_events/publisher.h"
#include "events/kv_event_ingestor.h"
#include "testing/wait_for.h"

namespace infera::events {
namespace {

using testing::WaitFor;

class Recovery : public ::testing::Test {
 protected:
  std::unique_ptr<EventPublisher> Start(size_t buffer, bool with_replay, WireShape shape,
                                        const std::string& pub_ep = "tcp://127.0.0.1:0",
                                        const std::string& replay_ep = "tcp://127.0.0.1:0") {
    auto pub = EventPublisher::Create({.pub_endpoint = pub_ep,
                                       .replay_endpoint = with_replay ? replay_ep : "",
                                       .topic = "kv-events",
                                       .shape = shape,
                                       .buffer_batches = buffer});
    EXPECT_TRUE(pub.ok()) << pub.status();
    return pub.ok() ? std::move(*pub) : nullptr;
  }

  core::TargetId Subscribe(const EventPublisher& pub, uint32_t rank = 0) {
    return ing_.AddTarget({.key = {"engine:1", rank},
                           .events_endpoint = pub.pub_endpoint(),
                           .replay_endpoint = pub.replay_endpoint(),
                           .block_size = 16,
                           .topic = "kv-events"});
  }

  IngestTargetStatus Status(uint32_t rank = 0) {
    for (const auto& s : ing_.TargetStatuses()) {
      if (s.key.dp_rank == rank) return s;
    }
    return {};
  }

  std::vector<core::BlockHash> View(core::TargetId id) {
    return ing_.WithIndex([&](const core::KvIndex& index) {
      std::vector<core::BlockHash> v = index.RouterHashes(id);
      std::sort(v.begin(), v.end());
      return v;
    });
  }

  // Publishes until the subscriber has applied at least one live message.
  uint64_t Warmup(EventPublisher& pub, FakeEngineCache& engine, uint32_t rank = 0) {
    uint64_t last = 0;
    for (int i = 0; i < 2000; ++i) {
      last = pub.Publish(engine.NextBatch());
      if (WaitForSeq(last, rank, /*quick=*/true)) break;
    }
    return last;
  }

  bool WaitForSeq(uint64_t seq, uint32_t rank = 0, bool quick = false) {
    if (quick) {
      for (int i = 0; i < 10; ++i) {
        if (Status(rank).last_seq == seq) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      return false;
    }
    return WaitFor([&] { return Status(rank).last_seq == seq; });
  }

  uint64_t Count(const std::atomic<uint64_t>& c) { return c.load(); }

  KvEventIngestor ing_{IngestorOptions{.replay_timeout_ms = 5000}};
};

TEST_F(Recovery, ReplayClosesGapsAndDuplicatesAreDropped) {
  auto pub = Start(10'000, true, WireShape::kVllm);
  FakeEngineCache engine({.seed = 11, .capacity_blocks = 600});
  const core::TargetId id = Subscribe(*pub);
  uint64_t last = Warmup(*pub, engine);
  for (int i = 0; i < 5; ++i) last = pub->Publish(engine.NextBatch());

  // Gaps of 1 and of 25 batches that only the replay buffer has.
  last = pub->PublishPayloadSkippingLive(EncodeEventBatch(engine.NextBatch(), WireShape::kVllm));
  last = pub->Publish(engine.NextBatch());
  ASSERT_TRUE(WaitForSeq(last));
  for (int i = 0; i < 25; ++i) {
    pub->PublishPayloadSkippingLive(EncodeEventBatch(engine.NextBatch(), WireShape::kVllm));
  }
  // Duplicates and out-of-order old messages (never seq 0: on a live stream that can
  // only be a restarted publisher).
  ASSERT_TRUE(pub->ResendForTest(last));
  ASSERT_TRUE(pub->ResendForTest(last - 3));
  for (int i = 0; i < 10; ++i) last = pub->Publish(engine.NextBatch());
  ASSERT_TRUE(pub->ResendForTest(last - 5));
  last = pub->Publish(engine.NextBatch());
  ASSERT_TRUE(WaitForSeq(last));

  EXPECT_EQ(View(id), engine.TruthRouterHashes());
  EXPECT_TRUE(Status().complete);
  EXPECT_GE(Count(ing_.counters().gaps), 2u);
  EXPECT_GE(Count(ing_.counters().replays), 2u);
  EXPECT_GE(Count(ing_.counters().dropped), 3u);
  EXPECT_EQ(Count(ing_.counters().resyncs), 0u)
      << "unknown parents " << Count(ing_.counters().unknown_parents) << " restarts "
      << Count(ing_.counters().restarts) << " decode errors "
      << Count(ing_.counters().decode_errors);
  EXPECT_EQ(Count(ing_.counters().replay_failures), 0u);
}

TEST_F(Recovery, UnrecoverableGapResyncsAndRebuilds) {
  // A buffer of 4 cannot cover a gap of 30: the view is cleared and rebuilt.
  auto pub = Start(4, true, WireShape::kSglang);
  FakeEngineCache engine({.seed = 12, .capacity_blocks = 400});
  const core::TargetId id = Subscribe(*pub);
  uint64_t last = Warmup(*pub, engine);
  for (int i = 0; i < 30; ++i) {
    pub->PublishPayloadSkippingLive(EncodeEventBatch(engine.NextBatch(), WireShape::kSglang));
  }
  last = pub->Publish(engine.NextBatch());
  ASSERT_TRUE(WaitForSeq(last));
  EXPECT_GE(Count(ing_.counters().resyncs), 1u);
  EXPECT_FALSE(Status().complete);
  // Never a stale block: whatever the view holds, the engine holds.
  const auto truth = engine.TruthRouterHashes();
  for (core::BlockHash h : View(id)) {
    EXPECT_TRUE(std::binary_search(truth.begin(), truth.end(), h));
  }
  // The engine resets its cache (AllBlocksCleared): from there the view is exact again.
  pub->Publish(engine.Clear());
  for (int i = 0; i < 20; ++i) last = pub->Publish(engine.NextBatch());
  ASSERT_TRUE(WaitForSeq(last));
  EXPECT_EQ(View(id), engine.TruthRouterHashes());
  EXPECT_TRUE(Status().complete);
}

TEST_F(Recovery, GapWithoutReplaySocketResyncs) {
  auto pub = Start(10'000, /*with_replay=*/false, WireShape::kVllmArray);
  FakeEngineCache engine({.seed = 13, .capacity_blocks = 300});
  const core::TargetId id = Subscribe(*pub);
  uint64_t last = Warmup(*pub, engine);
  pub->PublishPayloadSkippingLive(EncodeEventBatch(engine.NextBatch(), WireShape::kVllmArray));
  last = pub->Publish(engine.NextBatch());
  ASSERT_TRUE(WaitForSeq(last));
  EXPECT_GE(Count(ing_.counters().resyncs), 1u);
  EXPECT_EQ(Count(ing_.counters().replays), 0u);
  const auto truth = engine.TruthRouterHashes();
  for (core::BlockHash h : View(id)) {
    EXPECT_TRUE(std::binary_search(truth.begin(), truth.end(), h));
  }
}

TEST_F(Recovery, UndecodablePayloadIsCountedAndResyncs) {
  auto pub = Start(10'000, true, WireShape::kVllm);
  FakeEngineCache engine({.seed = 14, .capacity_blocks = 300});
  const core::TargetId id = Subscribe(*pub);
  uint64_t last = Warmup(*pub, engine);
  const uint64_t errors = Count(ing_.counters().decode_errors);
  last = pub->PublishPayload(std::string("\x92\x00\x91\x91\xa1X", 6));  // unknown tag
  ASSERT_TRUE(WaitForSeq(last));
  EXPECT_EQ(Count(ing_.counters().decode_errors), errors + 1);
  EXPECT_GE(Count(ing_.counters().resyncs), 1u);
  EXPECT_TRUE(View(id).empty());
  pub->Publish(engine.Clear());
  for (int i = 0; i < 10; ++i) last = pub->Publish(engine.NextBatch());
  ASSERT_TRUE(WaitForSeq(last));
  EXPECT_EQ(View(id), engine.TruthRouterHashes());
}

TEST_F(Recovery, PublisherRestartRebuildsFromTheNewStream) {
  auto pub = Start(10'000, true, WireShape::kVllm);
  const std::string pub_ep = pub->pub_endpoint();
  const std::string replay_ep = pub->replay_endpoint();
  FakeEngineCache engine({.seed = 15, .capacity_blocks = 500});
  const core::TargetId id = Subscribe(*pub);
  uint64_t last = Warmup(*pub, engine);
  for (int i = 0; i < 100; ++i) last = pub->Publish(engine.NextBatch());
  ASSERT_TRUE(WaitForSeq(last));
  ASSERT_EQ(View(id), engine.TruthRouterHashes());

  // The engine process restarts on the same ports with an empty cache: its sequence
  // numbers start at 0 again, and the subscriber may miss its first messages.
  pub.reset();
  pub = Start(10'000, true, WireShape::kVllm, pub_ep, replay_ep);
  ASSERT_NE(pub, nullptr);
  FakeEngineCache fresh({.seed = 16, .capacity_blocks = 500});
  for (int i = 0; i < 5; ++i) last = pub->Publish(fresh.NextBatch());
  ASSERT_TRUE(WaitFor([&] {
    last = pub->Publish(fresh.NextBatch());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return Status().last_seq == last;
  }));
  EXPECT_EQ(View(id), fresh.TruthRouterHashes());
  EXPECT_GE(Count(ing_.counters().restarts), 1u);
  EXPECT_TRUE(Status().complete);
}

TEST_F(Recovery, DataParallelRanksAreSeparateTargets) {
  auto rank0 = Start(10'000, true, WireShape::kSglang);
  auto rank1 = Start(10'000, true, WireShape::kSglang);
  FakeEngineCache e0({.seed = 17, .capacity_blocks = 300});
  FakeEngineCache e1({.seed = 18, .capacity_blocks = 300});
  const core::TargetId t0 = Subscribe(*rank0, 0);
  const core::TargetId t1 = Subscribe(*rank1, 1);
  uint64_t last0 = Warmup(*rank0, e0, 0);
  uint64_t last1 = Warmup(*rank1, e1, 1);
  for (int i = 0; i < 30; ++i) {
    last0 = rank0->Publish(e0.NextBatch());
    last1 = rank1->Publish(e1.NextBatch());
  }
  ASSERT_TRUE(WaitForSeq(last0, 0));
  ASSERT_TRUE(WaitForSeq(last1, 1));
  EXPECT_EQ(View(t0), e0.TruthRouterHashes());
  EXPECT_EQ(View(t1), e1.TruthRouterHashes());

  // Discovery removes rank 1 and adds it back: the view is rebuilt from the replay buffer.
  ing_.RemoveTarget({"engine:1", 1});
  const core::TargetId again = Subscribe(*rank1, 1);
  ASSERT_TRUE(WaitFor([&] {
    last1 = rank1->Publish(e1.NextBatch());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return Status(1).last_seq == last1;
  }));
  EXPECT_EQ(View(again), e1.TruthRouterHashes());
  EXPECT_TRUE(Status(1).complete);
}

}  // namespace
}  // namespace infera::events
