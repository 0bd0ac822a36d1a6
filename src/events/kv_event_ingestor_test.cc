// KvEventIngestor against a real in-process ZMQ publisher. Also the TSan test of the
// ingestion/read concurrency design (label "tsan").
#include "events/kv_event_ingestor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <zmq.hpp>

#include "core/hashing.h"
#include "engine_events/event_encoder.h"
#include "engine_events/fake_engine_cache.h"
#include "engine_events/publisher.h"
#include "testing/ingestor_test_support.h"
#include "testing/test_clock.h"
#include "testing/wait_for.h"

namespace infera::events {
namespace {

using testing::MakePublisher;
using testing::TargetFor;
using testing::WaitFor;

std::vector<core::BlockHash> View(const KvEventIngestor& ing, core::TargetId id) {
  return ing.WithIndex([&](const core::KvIndex& index) {
    std::vector<core::BlockHash> v = index.RouterHashes(id);
    std::sort(v.begin(), v.end());
    return v;
  });
}

// A wait that keeps a stream going publishes again only every this many polls of
// WaitFor (5 ms each): a predicate that published on every poll would chase its own
// newest message and never see it applied when the ingestor lags by more than one poll
// (it did under TSan on CI).
constexpr int kRepublishPolls = 50;

std::optional<uint64_t> LastSeq(const KvEventIngestor& ing) {
  auto statuses = ing.TargetStatuses();
  return statuses.empty() ? std::nullopt : statuses[0].last_seq;
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
  // A slow joiner under load may miss all 50: go on until one is seen.
  ASSERT_TRUE(WaitFor([&] {
    if (!LastSeq(ing)) last = pub->Publish(engine.NextBatch());
    return LastSeq(ing) == last;
  }));
  EXPECT_EQ(View(ing, id), engine.TruthRouterHashes());
  EXPECT_TRUE(ing.TargetStatuses()[0].complete);
  EXPECT_GE(ing.counters().replays.load(), 1u);
  EXPECT_EQ(ing.counters().resyncs.load(), 0u);
  EXPECT_EQ(ing.counters().decode_errors.load(), 0u);
}

TEST(KvEventIngestor, ReplayOnAddRebuildsAnIdleEnginesViewBeforeAnyLiveBatch) {
  // A restarted router in front of an engine that publishes nothing new: the view must
  // come from the replay socket alone, and Replaying() says when it is done.
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 11, .capacity_blocks = 512});
  for (int i = 0; i < 30; ++i) pub->Publish(engine.NextBatch());
  KvEventIngestor ing(IngestorOptions{.replay_on_add = true});
  const core::TargetId id = ing.AddTarget(TargetFor(*pub));
  EXPECT_TRUE(ing.Replaying());
  ASSERT_TRUE(WaitFor([&] { return !ing.Replaying(); }));
  EXPECT_EQ(View(ing, id), engine.TruthRouterHashes());
  EXPECT_TRUE(ing.TargetStatuses()[0].complete);
  EXPECT_EQ(LastSeq(ing), 29u);
  EXPECT_EQ(ing.counters().replays.load(), 1u);
  EXPECT_EQ(ing.counters().messages.load(), 0u);  // nothing live was needed
}

TEST(KvEventIngestor, ReplayOnAddEndsWhenTheEngineIsAwayOrTheTargetRemoved) {
  // Nothing answers at the replay endpoint: the replay times out and the source is
  // ready anyway; a target removed during its replay stops counting at once.
  auto pub = MakePublisher();
  IngestTarget away = TargetFor(*pub);
  away.key = {"away:1", 0};
  away.replay_endpoint = "tcp://127.0.0.1:1";  // refused: the DEALER keeps trying
  KvEventIngestor ing(IngestorOptions{.replay_timeout_ms = 200, .replay_on_add = true});
  ing.AddTarget(away);
  EXPECT_TRUE(ing.Replaying());
  ASSERT_TRUE(WaitFor([&] { return !ing.Replaying(); }));
  EXPECT_EQ(ing.counters().replay_failures.load(), 1u);
  ing.AddTarget(away);  // same settings: a no-op, no new replay
  EXPECT_FALSE(ing.Replaying());
  IngestTarget other = away;
  other.key = {"away:2", 0};
  ing.AddTarget(other);
  ing.RemoveTarget(other.key);
  ASSERT_TRUE(WaitFor([&] { return !ing.Replaying(); }));
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
  // Under load the subscription can go live only after the loop (a slow joiner: PUB
  // drops what it sends before that): keep the stream going until the ingestor has seen
  // it; its first message replays the rest from 0.
  EXPECT_TRUE(WaitFor([&] {
    if (!LastSeq(ing)) last = pub->Publish(engine.NextBatch());
    return LastSeq(ing) == last;
  }));
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

// What the subscriptions hold follows the followed targets (the HTTP server leaves it
// out of its connection cap; the per-target figure is measured in doc/perf-scale.md).
TEST(KvEventIngestor, DescriptorsHeldFollowTheTargets) {
  auto pub = MakePublisher();
  KvEventIngestor ing;
  const int64_t slots = 2 * IngestorOptions{}.max_concurrent_replays;
  EXPECT_EQ(ing.DescriptorsHeld(), slots);
  IngestTarget target = TargetFor(*pub);
  for (uint32_t rank = 0; rank < 3; ++rank) {
    target.key.dp_rank = rank;
    ing.AddTarget(target);
  }
  ing.AddTarget(target);  // the same again: no new subscription
  EXPECT_EQ(ing.DescriptorsHeld(), 3 * KvEventIngestor::kDescriptorsPerTarget + slots);
  ing.RemoveTarget({"engine:1", 1});
  EXPECT_EQ(ing.DescriptorsHeld(), 2 * KvEventIngestor::kDescriptorsPerTarget + slots);
}

// Two ranks of one worker that read the same stream (doc/data-parallel.md): a batch
// tagged with rank 1 lands in rank 1's view only, whichever stream it came on.
TEST(KvEventIngestor, BatchLandsInTheViewOfItsOwnRank) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 11, .capacity_blocks = 512});
  KvEventIngestor ing;
  IngestTarget rank0 = TargetFor(*pub), rank1 = TargetFor(*pub);
  rank1.key.dp_rank = 1;
  const core::TargetId id0 = ing.AddTarget(rank0), id1 = ing.AddTarget(rank1);
  auto seen_by_both = [&](uint64_t seq) {
    auto st = ing.TargetStatuses();
    return st.size() == 2 && st[0].last_seq == seq && st[1].last_seq == seq;
  };
  uint64_t last = 0;
  int polls = 0;
  ASSERT_TRUE(WaitFor([&] {
    if (polls++ % kRepublishPolls == 0) {
      EventBatch b = engine.NextBatch();
      b.dp_rank = 1;
      last = pub->Publish(b);
    }
    return seen_by_both(last);
  }));
  EXPECT_EQ(View(ing, id1), engine.TruthRouterHashes());
  EXPECT_FALSE(View(ing, id1).empty());
  EXPECT_TRUE(View(ing, id0).empty());
}

std::optional<uint64_t> LastSeqOf(const KvEventIngestor& ing, const std::string& host) {
  for (const auto& st : ing.TargetStatuses()) {
    if (st.key.worker_id == host) return st.last_seq;
  }
  return std::nullopt;
}

// Workers joining and leaving, each followed and then removed (doc/soak.md "Join
// probes"): a removed target's SUB closed before its monitor stopped could leave
// libzmq's I/O thread blocked for good on the monitor's disconnect event, and then no
// target got another message (the index soak lost joins that way).
TEST(KvEventIngestor, WorkersLeavingNeverFreezeIngestion) {
  KvEventIngestor ing(IngestorOptions{.replay_on_add = true});  // the router's options
  auto follow = [&](EventPublisher& pub, const std::string& host) {
    FakeEngineCache engine({.seed = 11, .capacity_blocks = 64});
    int polls = 0;
    return WaitFor(
        [&] {
          if (polls++ % 10 == 0) pub.Publish(engine.NextBatch());  // a probe every 50 ms
          return LastSeqOf(ing, host).has_value();
        },
        /*timeout_ms=*/20'000);
  };
  for (int i = 0; i < 12; ++i) {
    auto pub = MakePublisher();
    const std::string host = "leaver" + std::to_string(i);
    // A named target (g++ 12 -O3 warns maybe-uninitialized on the temporary's key).
    IngestTarget target;
    target.key = core::TargetKey{host + ":1", 0};
    target.events_endpoint = pub->pub_endpoint();
    target.block_size = 16;
    target.topic = "kv-events";
    ing.AddTarget(target);
    ASSERT_TRUE(follow(*pub, host + ":1")) << "join " << i << " never followed";
    // The engine leaves in the middle of a burst the router has not read yet (its SUB
    // queue full, so libzmq has stopped reading the connection): the engine goes first
    // or discovery removes it first.
    FakeEngineCache burst({.seed = 13, .capacity_blocks = 64});
    for (int b = 0; b < 500; ++b) pub->Publish(burst.NextBatch());
    if (i % 2 == 0) pub.reset();
    ing.RemoveTarget({host + ":1", 0});
  }
}

// A replay socket that takes requests and never answers (an engine whose replay
// port hangs).
struct SilentReplay {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  std::string endpoint;
  SilentReplay() {
    router.set(zmq::sockopt::linger, 0);
    router.bind("tcp://127.0.0.1:0");
    endpoint = router.get(zmq::sockopt::last_endpoint);
  }
};

// A publisher with a hung replay port and gapped messages must not hold up another
// target's events. Before, the replay ran on the ingestion thread for its whole
// timeout (here 10 minutes), so the healthy target's view stayed stale meanwhile.
TEST(KvEventIngestor, HungReplayDoesNotStallOtherTargets) {
  SilentReplay silent;
  auto bad = MakePublisher();
  auto good = MakePublisher();
  FakeEngineCache bad_engine({.seed = 1, .capacity_blocks = 256});
  FakeEngineCache good_engine({.seed = 2, .capacity_blocks = 256});
  KvEventIngestor ing(
      IngestorOptions{.replay_timeout_ms = 600'000, .replay_backoff_initial_ms = 600'000});
  IngestTarget bad_target = TargetFor(*bad);
  bad_target.key = {"bad:1", 0};
  bad_target.replay_endpoint = silent.endpoint;
  ing.AddTarget(bad_target);
  // A gap at the very start: the first live message the ingestor sees is not seq 0,
  // so it asks the (silent) replay port for the batches before it.
  bad->PublishPayloadSkippingLive(EncodeEventBatch(bad_engine.NextBatch(), WireShape::kVllm));
  ASSERT_TRUE(WaitFor([&] {
    bad->Publish(bad_engine.NextBatch());
    return ing.counters().replays.load() >= 1;
  }));
  IngestTarget good_target = TargetFor(*good);
  good_target.key = {"good:1", 0};
  const core::TargetId good_id = ing.AddTarget(good_target);
  uint64_t last = 0;
  int polls = 0;
  ASSERT_TRUE(WaitFor([&] {
    if (polls > 0 && LastSeqOf(ing, "good:1") == last) return true;
    if (polls++ % kRepublishPolls == 0) {
      last = good->Publish(good_engine.NextBatch());
      bad->PublishPayloadSkippingLive(EncodeEventBatch(bad_engine.NextBatch(), WireShape::kVllm));
      bad->Publish(bad_engine.NextBatch());
    }
    return false;
  })) << "the healthy target's events wait behind the hung replay";
  for (int i = 0; i < 20; ++i) last = good->Publish(good_engine.NextBatch());
  ASSERT_TRUE(WaitFor([&] { return LastSeqOf(ing, "good:1") == last; }));
  // The healthy target replayed what it missed before subscribing, too.
  EXPECT_EQ(View(ing, good_id), good_engine.TruthRouterHashes());
  // The hung replay is still in flight: the bad target's messages are held, nothing
  // applied for it.
  EXPECT_EQ(ing.counters().replay_failures.load(), 0u);
  EXPECT_FALSE(LastSeqOf(ing, "bad:1").has_value());
}

// A failed replay backs off: gaps during the backoff resync the target from the live
// stream instead of replaying again (before: every gap cost a full replay timeout).
TEST(KvEventIngestor, FailedReplayBacksOffAndGapsResync) {
  SilentReplay silent;
  auto bad = MakePublisher();
  FakeEngineCache engine({.seed = 4, .capacity_blocks = 256});
  KvEventIngestor ing(
      IngestorOptions{.replay_timeout_ms = 100, .replay_backoff_initial_ms = 600'000});
  IngestTarget target = TargetFor(*bad);
  target.replay_endpoint = silent.endpoint;
  const core::TargetId id = ing.AddTarget(target);
  bad->PublishPayloadSkippingLive(EncodeEventBatch(engine.NextBatch(), WireShape::kVllm));
  ASSERT_TRUE(WaitFor([&] {
    bad->Publish(engine.NextBatch());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return ing.counters().replay_failures.load() >= 1;
  }));
  uint64_t last = 0;
  int polls = 0;
  ASSERT_TRUE(WaitFor([&] {
    if (polls > 0 && LastSeq(ing) == last) return true;
    if (polls++ % kRepublishPolls == 0) last = bad->Publish(engine.NextBatch());
    return false;
  }));
  const uint64_t gaps_before = ing.counters().gaps.load();
  for (int i = 0; i < 5; ++i) {
    bad->PublishPayloadSkippingLive(EncodeEventBatch(engine.NextBatch(), WireShape::kVllm));
    last = bad->Publish(engine.NextBatch());
    ASSERT_TRUE(WaitFor([&] { return LastSeq(ing) == last; }));
  }
  EXPECT_EQ(ing.counters().gaps.load(), gaps_before + 5);
  EXPECT_EQ(ing.counters().replays.load(), 1u);
  EXPECT_EQ(ing.counters().replays_skipped.load(), 5u);
  // The view follows the stream from the last resync on: a subset of the truth.
  std::vector<core::BlockHash> truth = engine.TruthRouterHashes();
  std::sort(truth.begin(), truth.end());
  for (core::BlockHash h : View(ing, id)) {
    EXPECT_TRUE(std::binary_search(truth.begin(), truth.end(), h));
  }
  EXPECT_FALSE(ing.TargetStatuses()[0].complete);
}

// Replay deadlines and backoff follow the injected clock, not the wall: a 10-minute
// replay timeout and backoff pass the moment the test moves its clock.
TEST(KvEventIngestor, ReplayTimeoutAndBackoffFollowTheInjectedClock) {
  constexpr int64_t kTenMinutesNs = 600'000'000'000;
  SilentReplay silent;
  auto bad = MakePublisher();
  FakeEngineCache engine({.seed = 5, .capacity_blocks = 256});
  testing::SharedManualClock clock;
  KvEventIngestor ing(IngestorOptions{
      .replay_timeout_ms = 600'000, .replay_backoff_initial_ms = 600'000, .clock = &clock});
  IngestTarget target = TargetFor(*bad);
  target.replay_endpoint = silent.endpoint;
  ing.AddTarget(target);
  bad->PublishPayloadSkippingLive(EncodeEventBatch(engine.NextBatch(), WireShape::kVllm));
  ASSERT_TRUE(WaitFor([&] {
    bad->Publish(engine.NextBatch());
    return ing.counters().replays.load() >= 1;
  }));
  clock.Advance(kTenMinutesNs);  // the silent replay is now past its deadline
  ASSERT_TRUE(WaitFor([&] { return ing.counters().replay_failures.load() >= 1; }));
  // During the backoff a gap resyncs from the live stream instead of replaying.
  uint64_t last = bad->Publish(engine.NextBatch());
  ASSERT_TRUE(WaitFor([&] { return LastSeq(ing) == last; }));
  bad->PublishPayloadSkippingLive(EncodeEventBatch(engine.NextBatch(), WireShape::kVllm));
  last = bad->Publish(engine.NextBatch());
  ASSERT_TRUE(WaitFor([&] { return LastSeq(ing) == last; }));
  EXPECT_EQ(ing.counters().replays.load(), 1u);
  EXPECT_GE(ing.counters().replays_skipped.load(), 1u);
  // Once the clock passes the backoff, the next gap replays again.
  clock.Advance(kTenMinutesNs);
  ASSERT_TRUE(WaitFor([&] {
    bad->PublishPayloadSkippingLive(EncodeEventBatch(engine.NextBatch(), WireShape::kVllm));
    bad->Publish(engine.NextBatch());
    return ing.counters().replays.load() >= 2;
  }));
}

// --- Reconnect probe (doc/kv-events.md §4 "Reconnect probe") ---

// Publishes until the ingestor applied a live batch, then `more` batches; returns the
// last seq, once applied.
uint64_t FollowLive(const KvEventIngestor& ing, EventPublisher& pub, FakeEngineCache& engine,
                    int more = 20) {
  uint64_t last = 0;
  int polls = 0;
  EXPECT_TRUE(WaitFor([&] {
    if (polls > 0 && LastSeq(ing) == last) return true;
    if (polls++ % kRepublishPolls == 0) last = pub.Publish(engine.NextBatch());
    return false;
  }));
  for (int i = 0; i < more; ++i) last = pub.Publish(engine.NextBatch());
  EXPECT_TRUE(WaitFor([&] { return LastSeq(ing) == last; }));
  return last;
}

std::vector<std::string> Payloads(FakeEngineCache& engine, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(EncodeEventBatch(engine.NextBatch(), WireShape::kVllm));
  return out;
}

// An engine that restarts (empty cache, empty replay buffer) and publishes nothing:
// before the probe its old blocks stayed in the view until its next message, which
// may never come, and requests went there for hits that did not exist.
TEST(KvEventIngestor, IdleRestartedEngineIsClearedWithoutALiveMessage) {
  auto pub = MakePublisher();
  const std::string pub_ep = pub->pub_endpoint();
  const std::string replay_ep = pub->replay_endpoint();
  FakeEngineCache engine({.seed = 21, .capacity_blocks = 512});
  KvEventIngestor ing;
  const core::TargetId id = ing.AddTarget(TargetFor(*pub));
  FollowLive(ing, *pub, engine);
  ASSERT_FALSE(View(ing, id).empty());
  ASSERT_EQ(View(ing, id), engine.TruthRouterHashes());
  const uint64_t messages = ing.counters().messages.load();

  pub.reset();  // the engine process ends, and starts again on the same ports
  pub = MakePublisher(10'000, pub_ep, replay_ep);
  ASSERT_NE(pub, nullptr);
  ASSERT_TRUE(WaitFor([&] { return View(ing, id).empty(); }))
      << "the restarted engine's old blocks stay in the view";
  EXPECT_EQ(ing.counters().restarts.load(), 1u);
  ASSERT_TRUE(WaitFor([&] { return !LastSeq(ing).has_value(); }));
  EXPECT_EQ(ing.counters().messages.load(), messages);  // the new engine sent nothing
  // The new engine's stream is followed from its seq 0.
  FakeEngineCache fresh({.seed = 22, .capacity_blocks = 512});
  FollowLive(ing, *pub, fresh);
  EXPECT_EQ(View(ing, id), fresh.TruthRouterHashes());
  EXPECT_TRUE(ing.TargetStatuses()[0].complete);
}

// The engine restarts in place with a buffer of new batches from seq 0 (`batches`, given
// the seq applied last) and publishes nothing live: the view is cleared and rebuilt from
// that buffer alone.
void ExpectRebuiltFromNewBuffer(uint64_t seed, size_t (*batches)(uint64_t last)) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = seed, .capacity_blocks = 512});
  KvEventIngestor ing;
  const core::TargetId id = ing.AddTarget(TargetFor(*pub));
  const uint64_t last = FollowLive(ing, *pub, engine);
  const uint64_t messages = ing.counters().messages.load();
  FakeEngineCache fresh({.seed = seed + 1, .capacity_blocks = 512});
  const size_t n = batches(last);
  ASSERT_TRUE(pub->ReopenForTest(/*restart=*/true, Payloads(fresh, n)));
  ASSERT_TRUE(WaitFor([&] { return LastSeq(ing) == n - 1; }));
  EXPECT_EQ(View(ing, id), fresh.TruthRouterHashes());
  EXPECT_TRUE(ing.TargetStatuses()[0].complete);
  EXPECT_EQ(ing.counters().restarts.load(), 1u);
  EXPECT_EQ(ing.counters().messages.load(), messages);  // no live message was needed
}

// A buffer that starts again at 0 and stops short of the old last seq.
TEST(KvEventIngestor, IdleRestartWithANewBufferIsRebuiltFromIt) {
  ExpectRebuiltFromNewBuffer(23, [](uint64_t) -> size_t { return 3; });
}

// A buffer that reaches past the old last seq, with another batch there: the seq alone
// would pass for the same stream; the payload digest tells.
TEST(KvEventIngestor, RestartWithAnotherBatchAtTheLastSeqIsRebuilt) {
  ExpectRebuiltFromNewBuffer(25, [](uint64_t last) -> size_t { return last + 6; });
}

// The subscriber's connection drops and comes back to the same engine: the probe finds
// the batch applied last, keeps the view and replays what the buffer holds after it.
TEST(KvEventIngestor, PlainReconnectKeepsTheViewAndFillsTheGap) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 27, .capacity_blocks = 512});
  KvEventIngestor ing;
  const core::TargetId id = ing.AddTarget(TargetFor(*pub));
  FollowLive(ing, *pub, engine);
  const uint64_t replays = ing.counters().replays.load();
  const uint64_t messages = ing.counters().messages.load();
  uint64_t last = 0;  // only the buffer has these
  for (const std::string& p : Payloads(engine, 5)) last = pub->PublishPayloadSkippingLive(p);
  ASSERT_TRUE(pub->ReopenForTest());
  ASSERT_TRUE(WaitFor([&] { return LastSeq(ing) == last; }));
  EXPECT_EQ(View(ing, id), engine.TruthRouterHashes());
  EXPECT_TRUE(ing.TargetStatuses()[0].complete);
  EXPECT_EQ(ing.counters().replays.load(), replays + 1);
  EXPECT_EQ(ing.counters().messages.load(), messages);
  FollowLive(ing, *pub, engine);  // the live stream goes on
  EXPECT_EQ(View(ing, id), engine.TruthRouterHashes());
  EXPECT_EQ(ing.counters().restarts.load(), 0u);
  EXPECT_EQ(ing.counters().resyncs.load(), 0u);
  EXPECT_EQ(ing.counters().replay_failures.load(), 0u);
}

// A probe that gets no answer (a replay port that never replies) keeps the view, and
// the next live message decides, as before the probe: a stream that goes on is kept, a
// seq 0 is a restart.
TEST(KvEventIngestor, UnansweredProbeKeepsTheViewUntilTheNextMessage) {
  SilentReplay silent;
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 29, .capacity_blocks = 512});
  // The live stream goes on only after the probe's deadline: by then the subscription
  // has long reached the reopened PUB socket, so no live message is lost.
  KvEventIngestor ing(IngestorOptions{.replay_timeout_ms = 300, .replay_backoff_initial_ms = 1});
  IngestTarget target = TargetFor(*pub);
  target.replay_endpoint = silent.endpoint;
  const core::TargetId id = ing.AddTarget(target);
  FollowLive(ing, *pub, engine);
  const std::vector<core::BlockHash> view = View(ing, id);
  ASSERT_FALSE(view.empty());
  const uint64_t failures = ing.counters().replay_failures.load();
  ASSERT_TRUE(pub->ReopenForTest());
  ASSERT_TRUE(WaitFor([&] { return ing.counters().replay_failures.load() == failures + 1; }));
  EXPECT_EQ(View(ing, id), view);
  FollowLive(ing, *pub, engine, /*more=*/1);
  EXPECT_EQ(ing.counters().restarts.load(), 0u);

  ASSERT_TRUE(pub->ReopenForTest(/*restart=*/true));
  ASSERT_TRUE(WaitFor([&] { return ing.counters().replay_failures.load() == failures + 2; }));
  EXPECT_FALSE(View(ing, id).empty());
  FakeEngineCache fresh({.seed = 30, .capacity_blocks = 512});
  FollowLive(ing, *pub, fresh, /*more=*/0);
  EXPECT_EQ(ing.counters().restarts.load(), 1u);
  // Cleared: what the view holds now, the new engine holds (its first batches may have
  // gone by before the subscription reached it, and the replay port never answers).
  const std::vector<core::BlockHash> truth = fresh.TruthRouterHashes();
  for (core::BlockHash h : View(ing, id)) {
    EXPECT_TRUE(std::binary_search(truth.begin(), truth.end(), h));
  }
}

}  // namespace
}  // namespace infera::events
