// Snapshots through the ingestor against real in-process ZMQ publishers
// (doc/snapshot.md §11): a final snapshot written by one ingestor, loaded into the
// index of another, and the verify replay's outcomes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine_events/fake_engine_cache.h"
#include "engine_events/publisher.h"
#include "events/kv_event_ingestor.h"
#include "testing/ingestor_test_support.h"
#include "testing/wait_for.h"

namespace infera::events {
namespace {

using testing::MakePublisher;
using testing::TargetFor;
using testing::WaitFor;

std::vector<core::BlockHash> SharedView(const SharedKvIndex& index, const core::TargetKey& key) {
  return index.WithIndex([&](const core::KvIndex& i) {
    std::vector<core::BlockHash> v;
    if (auto id = i.FindTarget(key)) v = i.RouterHashes(*id);
    std::sort(v.begin(), v.end());
    return v;
  });
}

class SnapshotIngest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.path = ::testing::TempDir() + "/kv_snapshot_ingest_" + std::to_string(getpid());
    options_.interval_s = 0;
    options_.fleet_id = "test-fleet";
    std::remove(options_.path.c_str());
  }
  void TearDown() override { std::remove(options_.path.c_str()); }

  // An ingestor follows `pub` from seq 0 (replay on add), then writes its final snapshot.
  void WriteSnapshot(EventPublisher& pub, const std::vector<core::BlockHash>& truth) {
    SharedKvIndex index;
    KvEventIngestor ing(index, IngestorOptions{.replay_on_add = true, .snapshot = options_});
    ing.AddTarget(TargetFor(pub));
    ASSERT_TRUE(WaitFor([&] {
      return !ing.Replaying() && SharedView(index, {"engine:1", 0}) == truth;
    }));
    ing.RequestFinalSnapshot();
    ASSERT_TRUE(ing.WaitFinalSnapshot(10'000));
    EXPECT_EQ(ing.snapshot_stats()->writes_ok.load(), 1u);
  }

  // A restarted ingestor: loads the file, adds the target, waits for its verify.
  struct Restarted {
    SharedKvIndex index;
    std::shared_ptr<KvSnapshotStats> stats = std::make_shared<KvSnapshotStats>();
    std::unique_ptr<KvEventIngestor> ing;
  };
  // The router's way: the file checked, the staging index built beside the verify
  // (IngestorOptions::load); `gate`, when given, holds the build until it is released.
  std::unique_ptr<Restarted> Restart(const IngestTarget& target,
                                     std::function<void()> gate = nullptr) {
    auto r = std::make_unique<Restarted>();
    std::shared_ptr<KvSnapshotLoad> load =
        KvSnapshotLoad::Open(options_, SnapshotTransport::kZmq, r->stats);
    EXPECT_NE(load, nullptr);
    if (load == nullptr) return r;
    EXPECT_EQ(load->records().size(), 1u);
    if (gate) load->set_before_build(std::move(gate));
    r->ing = std::make_unique<KvEventIngestor>(r->index, IngestorOptions{.replay_on_add = true,
                                                                         .snapshot = options_,
                                                                         .snapshot_stats = r->stats,
                                                                         .load = std::move(load)});
    r->ing->AddTarget(target);
    return r;
  }
  uint64_t Verified(const Restarted& r, VerifyResult result) {
    return r.stats->verify[static_cast<size_t>(result)].load();
  }

  KvSnapshotOptions options_;
};

TEST_F(SnapshotIngest, VerifyOkReplaysOnlyWhatCameAfterTheRecord) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 3, .capacity_blocks = 512});
  for (int i = 0; i < 20; ++i) pub->Publish(engine.NextBatch());
  WriteSnapshot(*pub, engine.TruthRouterHashes());
  for (int i = 0; i < 5; ++i) pub->Publish(engine.NextBatch());  // while the router is down
  auto r = Restart(TargetFor(*pub));
  EXPECT_EQ(r->stats->loads[static_cast<size_t>(LoadResult::kLoaded)].load(), 1u);
  ASSERT_TRUE(WaitFor([&] { return !r->ing->Replaying(); }));
  EXPECT_EQ(Verified(*r, VerifyResult::kOk), 1u);
  EXPECT_EQ(SharedView(r->index, {"engine:1", 0}), engine.TruthRouterHashes());
  EXPECT_EQ(r->ing->counters().replayed_batches.load(), 6u);  // seq 19 (the check) .. 24
  EXPECT_EQ(r->ing->counters().resyncs.load(), 0u);
  EXPECT_TRUE(r->ing->TargetStatuses()[0].complete);
}

// A build held back by the test (Gate) until the test opens it.
class Gate {
 public:
  std::function<void()> Hook() {
    return [this] {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return open_; });
    };
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  ~Gate() { Open(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// §8.1 step 3: the verify replay runs while the staging index builds; what it brings is
// held and applied after the swap, and until then the router is "starting" (Replaying).
TEST_F(SnapshotIngest, VerifyDuringTheBuildIsAppliedAfterTheSwap) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 3, .capacity_blocks = 512});
  for (int i = 0; i < 20; ++i) pub->Publish(engine.NextBatch());
  WriteSnapshot(*pub, engine.TruthRouterHashes());
  for (int i = 0; i < 5; ++i) pub->Publish(engine.NextBatch());  // while the router is down
  Gate gate;
  auto r = Restart(TargetFor(*pub), gate.Hook());
  // The verify's whole reply (seq 19 .. 24, then the end marker) arrives during the build.
  ASSERT_TRUE(WaitFor([&] {
    return Verified(*r, VerifyResult::kOk) == 1 && r->ing->counters().replayed_batches.load() == 6;
  }));
  EXPECT_TRUE(r->ing->Replaying());
  EXPECT_TRUE(SharedView(r->index, {"engine:1", 0}).empty());  // nothing applied yet
  EXPECT_EQ(r->ing->counters().batches.load(), 0u);
  gate.Open();
  ASSERT_TRUE(WaitFor([&] { return !r->ing->Replaying(); }));
  EXPECT_EQ(r->ing->TargetStatuses()[0].last_seq, uint64_t{24});
  EXPECT_EQ(SharedView(r->index, {"engine:1", 0}), engine.TruthRouterHashes());
  EXPECT_EQ(r->ing->counters().resyncs.load(), 0u);
  EXPECT_TRUE(r->ing->TargetStatuses()[0].complete);
}

// A target discovery adds during the build (not in the file) keeps the id it was given:
// the staging index gives it the same one at the swap. Its replay from 0 is held too.
TEST_F(SnapshotIngest, TargetAddedDuringTheBuildKeepsItsId) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 3, .capacity_blocks = 512});
  for (int i = 0; i < 10; ++i) pub->Publish(engine.NextBatch());
  WriteSnapshot(*pub, engine.TruthRouterHashes());
  Gate gate;
  auto r = Restart(TargetFor(*pub), gate.Hook());
  auto pub2 = MakePublisher();
  FakeEngineCache engine2({.seed = 4, .capacity_blocks = 512});
  for (int i = 0; i < 4; ++i) pub2->Publish(engine2.NextBatch());
  IngestTarget second = TargetFor(*pub2);
  second.key = {"engine:2", 0};
  const core::TargetId id = r->ing->AddTarget(second);
  EXPECT_EQ(r->ing->FindTarget({"engine:1", 0}), core::TargetId{0});  // the record's id
  EXPECT_EQ(id, core::TargetId{1});
  ASSERT_TRUE(WaitFor([&] { return r->ing->counters().replayed_batches.load() == 5; }));
  EXPECT_TRUE(r->ing->Replaying());
  gate.Open();
  ASSERT_TRUE(WaitFor([&] { return !r->ing->Replaying(); }));
  const std::optional<core::TargetId> found = r->index.WithIndex([](const core::KvIndex& i) {
    return i.FindTarget({"engine:2", 0});
  });
  EXPECT_EQ(found, id);
  EXPECT_EQ(SharedView(r->index, {"engine:1", 0}), engine.TruthRouterHashes());
  EXPECT_EQ(SharedView(r->index, {"engine:2", 0}), engine2.TruthRouterHashes());
  EXPECT_EQ(Verified(*r, VerifyResult::kOk), 1u);
}

TEST_F(SnapshotIngest, RestartedEnginePastTheRecordFailsTheEpochCheck) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 3, .capacity_blocks = 512});
  for (int i = 0; i < 20; ++i) pub->Publish(engine.NextBatch());
  WriteSnapshot(*pub, engine.TruthRouterHashes());
  pub.reset();
  auto pub2 = MakePublisher();  // the engine restarted: seq from 0, other blocks
  FakeEngineCache engine2({.seed = 4, .capacity_blocks = 512});
  for (int i = 0; i < 25; ++i) pub2->Publish(engine2.NextBatch());
  auto r = Restart(TargetFor(*pub2));
  ASSERT_TRUE(WaitFor([&] { return !r->ing->Replaying(); }));
  EXPECT_EQ(Verified(*r, VerifyResult::kEpoch), 1u);
  EXPECT_EQ(SharedView(r->index, {"engine:1", 0}), engine2.TruthRouterHashes());
}

TEST_F(SnapshotIngest, RestartedEngineShortOfTheRecordIsEmpty) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 3, .capacity_blocks = 512});
  for (int i = 0; i < 20; ++i) pub->Publish(engine.NextBatch());
  WriteSnapshot(*pub, engine.TruthRouterHashes());
  pub.reset();
  auto pub2 = MakePublisher();
  FakeEngineCache engine2({.seed = 4, .capacity_blocks = 512});
  for (int i = 0; i < 5; ++i) pub2->Publish(engine2.NextBatch());
  auto r = Restart(TargetFor(*pub2));
  ASSERT_TRUE(WaitFor([&] { return !r->ing->Replaying(); }));
  EXPECT_EQ(Verified(*r, VerifyResult::kEmpty), 1u);
  EXPECT_EQ(SharedView(r->index, {"engine:1", 0}), engine2.TruthRouterHashes());
}

TEST_F(SnapshotIngest, BufferTrimmedPastTheRecordIsAGap) {
  auto pub = MakePublisher(/*buffer=*/8);
  FakeEngineCache engine({.seed = 3, .capacity_blocks = 4096});
  for (int i = 0; i < 6; ++i) pub->Publish(engine.NextBatch());
  WriteSnapshot(*pub, engine.TruthRouterHashes());
  for (int i = 0; i < 20; ++i) pub->Publish(engine.NextBatch());  // seq 5 left the buffer
  auto r = Restart(TargetFor(*pub));
  ASSERT_TRUE(WaitFor([&] { return !r->ing->Replaying(); }));
  EXPECT_EQ(Verified(*r, VerifyResult::kGap), 1u);
  EXPECT_FALSE(r->ing->TargetStatuses()[0].complete);  // the buffer does not start at 0
}

TEST_F(SnapshotIngest, WithoutAReplaySocketTheFirstLiveSeqDecides) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 3, .capacity_blocks = 512});
  for (int i = 0; i < 20; ++i) pub->Publish(engine.NextBatch());
  WriteSnapshot(*pub, engine.TruthRouterHashes());
  auto r = Restart(TargetFor(*pub, /*replay=*/false));
  // No verify replay: "starting" only until the staging index is swapped in.
  ASSERT_TRUE(WaitFor([&] { return !r->ing->Replaying(); }));
  uint64_t last = 0;
  auto verdicts = [&] {
    return Verified(*r, VerifyResult::kNoReplayOk) + Verified(*r, VerifyResult::kNoReplayResync);
  };
  ASSERT_TRUE(WaitFor([&] {
    if (verdicts() == 0) last = pub->Publish(engine.NextBatch());
    return verdicts() == 1 && r->ing->TargetStatuses()[0].last_seq == last;
  }));
  // A slow subscription may see its first live batch past seq 20: then it resyncs.
  if (Verified(*r, VerifyResult::kNoReplayOk) == 1) {
    EXPECT_EQ(SharedView(r->index, {"engine:1", 0}), engine.TruthRouterHashes());
  } else {
    EXPECT_EQ(r->ing->counters().resyncs.load(), 1u);
  }
}

TEST_F(SnapshotIngest, RecordsDiscoveryNeverAddsAreDropped) {
  auto pub = MakePublisher();
  FakeEngineCache engine({.seed = 3, .capacity_blocks = 512});
  for (int i = 0; i < 5; ++i) pub->Publish(engine.NextBatch());
  WriteSnapshot(*pub, engine.TruthRouterHashes());
  SharedKvIndex index;
  auto stats = std::make_shared<KvSnapshotStats>();
  auto restored = std::make_shared<RestoredTargets>(
      LoadKvSnapshot(options_, SnapshotTransport::kZmq, index, *stats));
  EXPECT_EQ(SharedView(index, {"engine:1", 0}).size(), engine.TruthRouterHashes().size());
  KvEventIngestor ing(index, IngestorOptions{.replay_on_add = true,
                                             .snapshot_stats = stats,
                                             .restored = restored,
                                             .unclaimed_after_ms = 1});
  ASSERT_TRUE(WaitFor([&] { return stats->refused_unclaimed.load() == 1; }));
  EXPECT_FALSE(index.WithIndex([](const core::KvIndex& i) {
    return i.FindTarget({"engine:1", 0}).has_value();
  }));
}

// With snapshots on, the descriptors the HTTP server leaves alone include the verify
// replays' slots and the writer's file and directory (doc/http.md: a burst of client
// connections must not starve the verifies or the snapshot write of descriptors).
TEST_F(SnapshotIngest, DescriptorsHeldCountVerifySlotsAndTheWriter) {
  const IngestorOptions defaults;
  const int64_t without = 2 * int64_t{defaults.max_concurrent_replays};
  KvEventIngestor off;
  EXPECT_EQ(off.DescriptorsHeld(), without);
  SharedKvIndex index;
  KvEventIngestor on(index, IngestorOptions{.snapshot = options_});
  EXPECT_EQ(on.DescriptorsHeld(),
            without + 2 * int64_t{defaults.max_concurrent_verify_replays} + 2);
}

}  // namespace
}  // namespace infera::events
