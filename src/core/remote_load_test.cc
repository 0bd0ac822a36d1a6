#include "core/remote_load.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace infera::core {
namespace {

RemoteLoadMessage Msg(std::string replica, uint64_t seq, RemoteLoadKind kind,
                      std::vector<RemoteTargetLoad> targets, uint64_t epoch = 1,
                      uint64_t ts_ms = 0) {
  return RemoteLoadMessage{.replica = std::move(replica),
                           .epoch = epoch,
                           .seq = seq,
                           .kind = kind,
                           .ts_ms = ts_ms == 0 ? seq : ts_ms,
                           .targets = std::move(targets)};
}

RemoteTargetLoad T(std::string worker, int64_t active, double pending = 0, uint32_t rank = 0,
                   int64_t tokens = 0, int64_t requests = 0) {
  return RemoteTargetLoad{.worker_id = std::move(worker),
                          .dp_rank = rank,
                          .active_blocks = active,
                          .pending_prefill_blocks = pending,
                          .demand_tokens = tokens,
                          .demand_requests = requests};
}

constexpr RemoteLoadKind kDelta = RemoteLoadKind::kDelta;
constexpr RemoteLoadKind kSnap = RemoteLoadKind::kSnapshot;
const TargetKey kW1{"w1", 0};
const TargetKey kW2{"w2", 0};

TEST(RemoteLoadTest, DeltasAfterASnapshotAddAndSumOverReplicas) {
  RemoteLoad remote({.self_replica = "me"});
  EXPECT_EQ(remote.Apply(Msg("a", 1, kSnap, {T("w1", 10, 4)}), 0), RemoteApply::kApplied);
  EXPECT_EQ(remote.Apply(Msg("a", 2, kDelta, {T("w1", 5, 2), T("w2", 3)}), 1),
            RemoteApply::kApplied);
  EXPECT_EQ(remote.Apply(Msg("b", 7, kSnap, {T("w1", 1, 1, 0, 100, 2)}), 1), RemoteApply::kApplied);
  RemoteLoad::Load w1 = remote.Totals(kW1);
  EXPECT_EQ(w1.active_blocks, 16);
  EXPECT_DOUBLE_EQ(w1.pending_prefill_blocks, 7);
  EXPECT_EQ(w1.demand_tokens, 100);
  EXPECT_EQ(w1.demand_requests, 2);
  EXPECT_EQ(remote.Totals(kW2).active_blocks, 3);
  EXPECT_EQ(remote.replicas(), 2u);
  // The release deltas bring everything back to zero and the keys go away.
  EXPECT_EQ(remote.Apply(Msg("a", 3, kDelta, {T("w1", -15, -6), T("w2", -3)}), 2),
            RemoteApply::kApplied);
  EXPECT_EQ(remote.Apply(Msg("b", 8, kDelta, {T("w1", -1, -1, 0, -100, -2)}), 2),
            RemoteApply::kApplied);
  EXPECT_TRUE(remote.Totals(kW1).empty());
  EXPECT_TRUE(remote.Totals(kW2).empty());
  size_t keys = 0;
  remote.ForEachTotal([&](const TargetKey&, const RemoteLoad::Load&) { ++keys; });
  EXPECT_EQ(keys, 0u);
}

TEST(RemoteLoadTest, DpRanksAreSeparateTargets) {
  RemoteLoad remote;
  remote.Apply(Msg("a", 1, kSnap, {T("w1", 2, 0, 0), T("w1", 9, 0, 1)}), 0);
  EXPECT_EQ(remote.Totals({"w1", 0}).active_blocks, 2);
  EXPECT_EQ(remote.Totals({"w1", 1}).active_blocks, 9);
  remote.RemoveWorker("w1");
  EXPECT_TRUE(remote.Totals({"w1", 1}).empty());
}

TEST(RemoteLoadTest, AGapDropsDeltasUntilTheNextSnapshotReplacesTheTotals) {
  RemoteLoad remote;
  remote.Apply(Msg("a", 1, kSnap, {T("w1", 10)}), 0);
  // seq 2 was lost: seq 3 is a gap; its totals stay as they were.
  EXPECT_EQ(remote.Apply(Msg("a", 3, kDelta, {T("w1", 5)}), 1), RemoteApply::kGap);
  EXPECT_EQ(remote.gaps(), 1u);
  EXPECT_EQ(remote.Totals(kW1).active_blocks, 10);
  EXPECT_EQ(remote.synced_replicas(), 0u);
  EXPECT_EQ(remote.Apply(Msg("a", 4, kDelta, {T("w1", 1)}), 2), RemoteApply::kUnsynced);
  EXPECT_EQ(remote.Totals(kW1).active_blocks, 10);
  // The snapshot replaces: w1 is gone from it, w2 is new.
  EXPECT_EQ(remote.Apply(Msg("a", 5, kSnap, {T("w2", 7)}), 3), RemoteApply::kApplied);
  EXPECT_TRUE(remote.Totals(kW1).empty());
  EXPECT_EQ(remote.Totals(kW2).active_blocks, 7);
  EXPECT_EQ(remote.Apply(Msg("a", 6, kDelta, {T("w2", 1)}), 4), RemoteApply::kApplied);
  EXPECT_EQ(remote.Totals(kW2).active_blocks, 8);
  EXPECT_EQ(remote.gaps(), 1u);
}

TEST(RemoteLoadTest, AFirstDeltaWaitsForASnapshotAndDuplicatesAreStale) {
  RemoteLoad remote;
  EXPECT_EQ(remote.Apply(Msg("a", 4, kDelta, {T("w1", 5)}), 0), RemoteApply::kUnsynced);
  EXPECT_TRUE(remote.Totals(kW1).empty());
  EXPECT_EQ(remote.Apply(Msg("a", 5, kSnap, {T("w1", 2)}), 0), RemoteApply::kApplied);
  EXPECT_EQ(remote.Apply(Msg("a", 6, kDelta, {T("w1", 1)}), 0), RemoteApply::kApplied);
  EXPECT_EQ(remote.Apply(Msg("a", 6, kDelta, {T("w1", 1)}), 0), RemoteApply::kStale);
  EXPECT_EQ(remote.Apply(Msg("a", 5, kSnap, {T("w1", 2)}), 0), RemoteApply::kStale);
  EXPECT_EQ(remote.Totals(kW1).active_blocks, 3);
  EXPECT_EQ(remote.gaps(), 0u);
}

TEST(RemoteLoadTest, ASplitSnapshotsPartsAddUpAndTheNextHeartbeatReplaces) {
  RemoteLoad remote;
  remote.Apply(Msg("a", 1, kSnap, {T("w1", 1)}, 1, 500), 0);
  remote.Apply(Msg("a", 2, kSnap, {T("w2", 2)}, 1, 500), 0);  // part 2, same ts
  EXPECT_EQ(remote.Totals(kW1).active_blocks, 1);
  EXPECT_EQ(remote.Totals(kW2).active_blocks, 2);
  remote.Apply(Msg("a", 3, kSnap, {T("w2", 4)}, 1, 1500), 1000);  // next heartbeat
  EXPECT_TRUE(remote.Totals(kW1).empty());
  EXPECT_EQ(remote.Totals(kW2).active_blocks, 4);
}

TEST(RemoteLoadTest, ANewEpochReplacesAndAnOldOneIsStale) {
  RemoteLoad remote;
  remote.Apply(Msg("a", 9, kSnap, {T("w1", 10)}, /*epoch=*/2), 0);
  EXPECT_EQ(remote.Apply(Msg("a", 10, kDelta, {T("w1", 1)}, /*epoch=*/1), 0), RemoteApply::kStale);
  EXPECT_EQ(remote.Totals(kW1).active_blocks, 10);
  // Epoch 3 starts over: its delta waits for its snapshot, the old totals are gone.
  EXPECT_EQ(remote.Apply(Msg("a", 1, kDelta, {T("w1", 1)}, /*epoch=*/3), 0),
            RemoteApply::kUnsynced);
  EXPECT_TRUE(remote.Totals(kW1).empty());
}

TEST(RemoteLoadTest, ASilentReplicaExpiresAfterTheTtlWithAllItsLoad) {
  RemoteLoadOptions options;
  options.ttl_ms = 3000;
  RemoteLoad remote(options);
  remote.Apply(Msg("a", 1, kSnap, {T("w1", 10, 5)}), 1000);
  remote.Apply(Msg("b", 1, kSnap, {T("w1", 1)}), 1000);
  remote.Apply(Msg("b", 2, kSnap, {T("w1", 1)}), 3500);  // b heartbeats, a is silent
  EXPECT_EQ(remote.Expire(4000), 0u);                    // exactly the TTL: still live
  EXPECT_EQ(remote.Totals(kW1).active_blocks, 11);
  EXPECT_EQ(remote.Expire(4001), 1u);
  EXPECT_EQ(remote.expired(), 1u);
  EXPECT_EQ(remote.replicas(), 1u);
  EXPECT_EQ(remote.Totals(kW1).active_blocks, 1);
  EXPECT_DOUBLE_EQ(remote.Totals(kW1).pending_prefill_blocks, 0);
  EXPECT_EQ(remote.Expire(10000), 1u);
  EXPECT_TRUE(remote.Totals(kW1).empty());
  // A replica that comes back after expiring starts as new (waits for a snapshot).
  EXPECT_EQ(remote.Apply(Msg("a", 2, kDelta, {T("w1", 1)}), 10001), RemoteApply::kUnsynced);
}

TEST(RemoteLoadTest, OwnMessagesAreIgnored) {
  RemoteLoad remote({.self_replica = "me"});
  EXPECT_EQ(remote.Apply(Msg("me", 1, kSnap, {T("w1", 10)}), 0), RemoteApply::kSelf);
  EXPECT_TRUE(remote.Totals(kW1).empty());
  EXPECT_EQ(remote.replicas(), 0u);
}

TEST(RemoteLoadTest, NegativeSumsClampToZero) {
  RemoteLoad remote;
  remote.Apply(Msg("a", 1, kSnap, {T("w1", 2)}), 0);
  remote.Apply(Msg("a", 2, kDelta, {T("w1", -5, -1.5)}), 0);
  remote.Apply(Msg("b", 1, kSnap, {T("w1", 1)}), 0);
  RemoteLoad::Load l = remote.Totals(kW1);
  EXPECT_EQ(l.active_blocks, 0);
  EXPECT_EQ(l.pending_prefill_blocks, 0);
}

TEST(RemoteLoadTest, BadAndOversizedMessagesAreRejectedWhole) {
  RemoteLoadOptions options;
  options.max_replicas = 2;
  options.max_targets_per_message = 3;
  options.max_id_bytes = 16;
  RemoteLoad remote(options);
  remote.Apply(Msg("a", 1, kSnap, {T("w1", 1)}), 0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<RemoteLoadMessage> bad = {
      Msg("", 2, kDelta, {T("w1", 1)}),
      Msg(std::string(17, 'r'), 1, kSnap, {T("w1", 1)}),
      Msg("a", 2, kDelta, {T("w1", 1), T("w2", 1), T("w3", 1), T("w4", 1)}),
      Msg("a", 2, kDelta, {T("", 1)}),
      Msg("a", 2, kDelta, {T(std::string(17, 'w'), 1)}),
      Msg("a", 2, kDelta, {T("w1", 1, nan)}),
      Msg("a", 2, kDelta, {T("w1", 1, inf)}),
      Msg("a", 2, kDelta, {T("w1", std::numeric_limits<int64_t>::max())}),
      Msg("a", 2, kDelta, {T("w1", 0, 0, 0, std::numeric_limits<int64_t>::min())}),
      Msg("a", 2, kSnap, {T("w1", -1)}),  // a negative total
  };
  RemoteLoadMessage v2 = Msg("a", 2, kDelta, {T("w1", 1)});
  v2.version = 2;
  bad.push_back(v2);
  for (const RemoteLoadMessage& m : bad) {
    EXPECT_EQ(remote.Apply(m, 1), RemoteApply::kRejected) << m.replica << " " << m.seq;
  }
  EXPECT_EQ(remote.rejected(), bad.size());
  // Nothing changed: the replica is still synced at seq 1 and the next delta applies.
  EXPECT_EQ(remote.Totals(kW1).active_blocks, 1);
  EXPECT_EQ(remote.Apply(Msg("a", 2, kDelta, {T("w1", 1)}), 1), RemoteApply::kApplied);
  EXPECT_EQ(remote.Totals(kW1).active_blocks, 2);
  // The replica table is bounded.
  EXPECT_EQ(remote.Apply(Msg("b", 1, kSnap, {}), 1), RemoteApply::kApplied);
  EXPECT_EQ(remote.Apply(Msg("c", 1, kSnap, {T("w1", 1)}), 1), RemoteApply::kRejected);
  EXPECT_EQ(remote.replicas(), 2u);
  EXPECT_STREQ(RemoteApplyName(RemoteApply::kGap), "gap");
}

}  // namespace
}  // namespace infera::core
