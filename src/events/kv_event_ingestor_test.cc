// KvEventIngestor against a real in-process ZMQ publisher. Also the TSan test of the
// ingestion/read concurrency design (label "tsan").
#include "events/kv_event_ingestor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/hashing.h"
#include "events/fake_engine_cache.h"
#include "events/publisher.h"
#include "testing/wait_for.h"

namespace infera::events {
namespace {

using testing::WaitFor;

std::vector<core::BlockHash> View(const KvEventIngestor& ing, core::TargetId id) {
  return ing.WithIndex([&](const core::KvIndex& index) {
    std::vector<core::BlockHash> v = index.RouterHashes(id);
    std::sort(v.begin(), v.end());
    return v;
  });
}

std::optional<uint64_t> LastSeq(const KvEventIngestor& ing) {
  auto statuses = ing.TargetStatuses();
  return statuses.empty() ? std::nullopt : statuses[0].last_seq;
}

std::unique_ptr<EventPublisher> MakePublisher(size_t buffer = 10'000) {
  auto pub = EventPublisher::Create({.pub_endpoint = "tcp://127.0.0.1:0",
                                     .replay_endpoint = "tcp://127.0.0.1:0",
                                     .topic = "kv-events",
                                     .shape = WireShape::kVllm,
                                     .buffer_batches = buffer});
  EXPECT_TRUE(pub.ok()) << pub.status();
  return std::move(*pub);
}

IngestTarget TargetFor(const EventPublisher& pub) {
  return {.key = {"engine:1", 0},
          .events_endpoint = pub.pub_endpoint(),
          .replay_endpoint = pub.replay_endpoint(),
          .block_size = 16,
          .topic = "kv-events"};
}

TEST(KvEventIngestor, ConvergesAndCatchesUpThroughReplay) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 7, .capacity_blocks = 512});
  // Published before anyone subscribed: only the replay buffer has these.
  for (int i = 0; i < 20; ++i) pub->Publish(engine.NextBatch());
  KvEventIngestor ing;
  const core::TargetId id = ing.AddTarget(TargetFor(*pub));
  // Keep publishing until the subscription is live; the first live message makes the
  // ingestor replay from 0.
  uint64_t last = 0;
  for (int i = 0; i < 50; ++i) {
    last = pub->Publish(engine.NextBatch());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(WaitFor([&] { return LastSeq(ing) == last; }));
  EXPECT_EQ(View(ing, id), engine.TruthRouterHashes());
  EXPECT_TRUE(ing.TargetStatuses()[0].complete);
  EXPECT_GE(ing.counters().replays.load(), 1u);
  EXPECT_EQ(ing.counters().resyncs.load(), 0u);
  EXPECT_EQ(ing.counters().decode_errors.load(), 0u);
}

TEST(KvEventIngestor, ReadersRunConcurrentlyWithIngestion) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 3, .capacity_blocks = 256, .document_blocks = 16});
  KvEventIngestor ing;
  const core::TargetId id = ing.AddTarget(TargetFor(*pub));
  // Chains the readers look up: prefixes of the engine's documents.
  std::vector<std::vector<core::BlockHash>> chains;
  for (uint64_t s = 0; s < 8; ++s) {
    std::vector<core::TokenId> tokens(16 * 16);
    core::Random r(s);
    for (auto& t : tokens) t = static_cast<core::TokenId>(r.Uniform(1000));
    chains.push_back(core::HashChain(tokens, 16));
  }
  std::atomic<bool> done{false};
  std::atomic<uint64_t> lookups{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      std::vector<core::MatchCounts> out(1);
      const core::TargetId candidates[] = {id};
      size_t i = t;
      while (!done.load()) {
        ing.WithIndex([&](const core::KvIndex& index) {
          index.FindMatches(chains[i++ % chains.size()], candidates, out);
          return index.BlockCount(id);
        });
        lookups.fetch_add(1);
      }
    });
  }
  uint64_t last = 0;
  for (int i = 0; i < 300; ++i) {
    last = pub->Publish(engine.NextBatch());
    if (i % 50 == 0) {
      // Targets come and go at run time while readers read.
      ing.AddTarget({.key = {"other:1", 0}, .block_size = 16});
      ing.RemoveTarget({"other:1", 0});
    }
  }
  EXPECT_TRUE(WaitFor([&] { return LastSeq(ing) == last; }));
  done.store(true);
  for (auto& r : readers) r.join();
  EXPECT_GT(lookups.load(), 0u);
  {
    auto lock = ing.ReadLock();  // the Selector-style reader
    EXPECT_EQ(ing.index().BlockCount(id), engine.TruthRouterHashes().size());
  }
  EXPECT_EQ(View(ing, id), engine.TruthRouterHashes());
}

TEST(KvEventIngestor, RemovedTargetLeavesTheIndex) {
  auto pub = MakePublisher();
  KvEventIngestor ing;
  const core::TargetId id = ing.AddTarget(TargetFor(*pub));
  EXPECT_EQ(ing.AddTarget(TargetFor(*pub)), id);  // idempotent
  ASSERT_EQ(ing.FindTarget({"engine:1", 0}), id);
  ing.RemoveTarget({"engine:1", 0});
  EXPECT_FALSE(ing.FindTarget({"engine:1", 0}).has_value());
  EXPECT_TRUE(ing.WithIndex([](const core::KvIndex& index) { return index.Targets().empty(); }));
  ing.RemoveTarget({"engine:1", 0});  // unknown: ignored
}

}  // namespace
}  // namespace infera::events
