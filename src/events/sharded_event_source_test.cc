// ShardedKvEventSource against real in-process ZMQ publishers, side by side with one
// KvEventIngestor following the same streams: the views must be the same. Part of
// events_ingestor_test (label "tsan": the shards write one index concurrently while a
// reader reads it).
#include "events/sharded_event_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine_events/event_encoder.h"
#include "engine_events/fake_engine_cache.h"
#include "engine_events/publisher.h"
#include "testing/ingestor_test_support.h"
#include "testing/wait_for.h"

namespace infera::events {
namespace {

using testing::MakePublisher;
using testing::WaitFor;

std::vector<core::BlockHash> ViewOf(const SharedKvIndex& index, const core::TargetKey& key) {
  return index.WithIndex([&](const core::KvIndex& i) {
    std::optional<core::TargetId> id = i.FindTarget(key);
    std::vector<core::BlockHash> v;
    if (id) v = i.RouterHashes(*id);
    std::sort(v.begin(), v.end());
    return v;
  });
}

template <class Source>
std::optional<uint64_t> LastSeqOf(const Source& source, const core::TargetKey& key) {
  for (const IngestTargetStatus& st : source.TargetStatuses()) {
    if (st.key == key) return st.last_seq;
  }
  return std::nullopt;
}

// One simulated engine: its publisher (PUB + replay ROUTER) and its cache.
struct Engine {
  std::unique_ptr<EventPublisher> pub = MakePublisher();
  FakeEngineCache cache;
  core::TargetKey key;
  uint64_t last = 0;
  explicit Engine(int i)
      : cache({.seed = static_cast<uint64_t>(100 + i), .capacity_blocks = 256}),
        key{"engine" + std::to_string(i) + ":1", 0} {}
  IngestTarget Target() const {
    IngestTarget t = testing::TargetFor(*pub);
    t.key = key;
    return t;
  }
  void Publish() { last = pub->Publish(cache.NextBatch()); }
};

class ShardedSourceTest : public ::testing::Test {
 protected:
  static constexpr int kEngines = 6;
  // Published again only every this many polls (kv_event_ingestor_test.cc says why).
  static constexpr int kRepublishPolls = 50;

  void SetUp() override {
    for (int i = 0; i < kEngines; ++i) engines_.push_back(std::make_unique<Engine>(i));
  }

  // Until both sources have applied every engine's last batch; an engine one of them
  // has not caught up with publishes again now and then (a slow joiner's SUB drops
  // what was sent before it connected, and only a later message shows the gap).
  bool Settle(const ShardedKvEventSource& sharded, const KvEventIngestor& single) {
    int polls = 0;
    return WaitFor([&] {
      bool all = true;
      const bool republish = polls++ % kRepublishPolls == kRepublishPolls - 1;
      for (auto& e : engines_) {
        if (LastSeqOf(sharded, e->key) == e->last && LastSeqOf(single, e->key) == e->last) {
          continue;
        }
        all = false;
        if (republish) e->Publish();
      }
      return all;
    });
  }

  std::vector<std::unique_ptr<Engine>> engines_;
};

// Replay from 0 at add, live batches, a gap closed by replay, an engine reset (clear),
// a target added and removed at run time, a reader reading throughout: the sharded
// views equal the single ingestor's and the engines' own.
TEST_F(ShardedSourceTest, ViewsEqualOneIngestorsOverTheSameStreams) {
  for (auto& e : engines_) {
    for (int b = 0; b < 20; ++b) e->Publish();  // only the replay buffers have these
  }
  const IngestorOptions options{.replay_on_add = true};  // the router's
  SharedKvIndex sharded_index, single_index;
  ShardedKvEventSource sharded(sharded_index, options, 2);
  KvEventIngestor single(single_index, options);
  std::set<size_t> shards_used;
  for (auto& e : engines_) {
    sharded.AddTarget(e->Target());
    single.AddTarget(e->Target());
    shards_used.insert(sharded.ShardOf(e->key));
  }
  ASSERT_EQ(shards_used.size(), 2u) << "the targets should spread over both shards";
  for (size_t s = 0; s < 2; ++s) EXPECT_FALSE(sharded.shard(s).TargetStatuses().empty());
  EXPECT_EQ(sharded.TargetStatuses().size(), static_cast<size_t>(kEngines));

  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0};
  std::thread reader([&] {
    std::vector<core::TokenId> tokens(64, 7);
    const std::vector<core::BlockHash> chain = core::HashChain(tokens, 16);
    while (!done.load()) {
      sharded_index.WithIndex([&](const core::KvIndex& index) {
        std::vector<core::TargetId> ids = index.Targets();
        std::vector<core::MatchCounts> out(ids.size());
        index.FindMatches(chain, ids, out);
        return out.size();
      });
      reads.fetch_add(1);
    }
  });

  for (int round = 0; round < 3; ++round) {
    for (auto& e : engines_) e->Publish();
  }
  ASSERT_TRUE(Settle(sharded, single)) << "live stream";
  EXPECT_TRUE(sharded.counters().replays.load() >= static_cast<uint64_t>(kEngines));

  // A gap on two engines (one per shard when they differ) and a reset on a third.
  const uint64_t gaps_before = sharded.counters().gaps.load();
  for (int i : {0, 1}) {
    Engine& e = *engines_[static_cast<size_t>(i)];
    e.pub->PublishPayloadSkippingLive(EncodeEventBatch(e.cache.NextBatch(), WireShape::kVllm));
    e.Publish();
  }
  engines_[2]->last = engines_[2]->pub->Publish(engines_[2]->cache.Clear());
  engines_[2]->Publish();
  // Targets come and go on the shards while they ingest.
  for (int i = 0; i < 4; ++i) {
    const core::TargetKey extra{"extra" + std::to_string(i) + ":1", 0};
    sharded.AddTarget({.key = extra, .block_size = 16});
    EXPECT_TRUE(sharded.FindTarget(extra).has_value());
    sharded.RemoveTarget(extra);
    EXPECT_FALSE(sharded.FindTarget(extra).has_value());
  }
  for (auto& e : engines_) e->Publish();
  ASSERT_TRUE(Settle(sharded, single)) << "after the gaps and the clear";
  done.store(true);
  reader.join();
  EXPECT_GT(reads.load(), 0u);

  for (auto& e : engines_) {
    const std::vector<core::BlockHash> view = ViewOf(sharded_index, e->key);
    EXPECT_EQ(view, ViewOf(single_index, e->key)) << e->key.ToString();
    EXPECT_EQ(view, e->cache.TruthRouterHashes()) << e->key.ToString();
  }
  for (const IngestTargetStatus& st : sharded.TargetStatuses()) {
    EXPECT_TRUE(st.complete) << st.key.ToString();
  }
  const KvEventCounters& c = sharded.counters();
  EXPECT_GE(c.gaps.load(), gaps_before + 2);
  EXPECT_GE(c.cleared.load(), 1u);
  EXPECT_EQ(c.resyncs.load(), 0u);
  EXPECT_EQ(c.decode_errors.load(), 0u);
  EXPECT_EQ(sharded_index.WithIndex([](const core::KvIndex& i) { return i.Targets().size(); }),
            static_cast<size_t>(kEngines));
  // The replay slots are split, not multiplied: the same descriptors as one ingestor.
  EXPECT_EQ(sharded.DescriptorsHeld(), single.DescriptorsHeld());
  EXPECT_FALSE(sharded.Replaying());
  for (auto& e : engines_) sharded.RemoveTarget(e->key);
  EXPECT_TRUE(sharded_index.WithIndex([](const core::KvIndex& i) { return i.Targets().empty(); }));
}

TEST(ShardedKvEventSource, SplitsReplaySlotsAndRefusesSnapshots) {
  const IngestorOptions options{.max_concurrent_replays = 4, .max_concurrent_verify_replays = 1};
  EXPECT_EQ(ShardedKvEventSource::ShardOptions(options, 0, 3).max_concurrent_replays, 2);
  EXPECT_EQ(ShardedKvEventSource::ShardOptions(options, 1, 3).max_concurrent_replays, 1);
  EXPECT_EQ(ShardedKvEventSource::ShardOptions(options, 2, 3).max_concurrent_replays, 1);
  EXPECT_EQ(ShardedKvEventSource::ShardOptions(options, 1, 3).max_concurrent_verify_replays, 1);
  SharedKvIndex index;
  IngestorOptions snapshots;
  snapshots.snapshot.path = "/nonexistent/kv.snap";
  EXPECT_THROW({ ShardedKvEventSource refused(index, snapshots, 2); }, std::invalid_argument);
  EXPECT_NE(dynamic_cast<KvEventIngestor*>(MakeZmqEventSource(index, {}, 1).get()), nullptr);
  EXPECT_NE(dynamic_cast<ShardedKvEventSource*>(MakeZmqEventSource(index, {}, 2).get()), nullptr);
}

}  // namespace
}  // namespace infera::events
