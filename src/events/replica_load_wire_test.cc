#include "events/replica_load_wire.h"

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "core/remote_load.h"

namespace infera::events {
namespace {

std::span<const uint8_t> AsSpan(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

core::RemoteLoadMessage Message(size_t targets) {
  core::RemoteLoadMessage m{.replica = "host:42:deadbeef",
                            .epoch = 7,
                            .seq = 100,
                            .kind = core::RemoteLoadKind::kSnapshot,
                            .ts_ms = 123456,
                            .targets = {}};
  for (size_t i = 0; i < targets; ++i) {
    m.targets.push_back({.worker_id = "10.0.0." + std::to_string(i) + ":8000",
                         .dp_rank = static_cast<uint32_t>(i % 3),
                         .active_blocks = static_cast<int64_t>(i) * 1000,
                         .pending_prefill_blocks = 0.5 + static_cast<double>(i),
                         .demand_tokens = -static_cast<int64_t>(i) * 70000,
                         .demand_requests = 2});
  }
  return m;
}

TEST(ReplicaLoadWireTest, SubjectIsBase64UrlOfTheReplicaId) {
  EXPECT_EQ(ReplicaLoadSubject("a:1"), "infera.router.load.YTox");
}

TEST(ReplicaLoadWireTest, RoundTripsEveryField) {
  core::RemoteLoadMessage m = Message(3);
  std::vector<std::string> parts = EncodeReplicaLoad(m);
  ASSERT_EQ(parts.size(), 1u);
  auto decoded = DecodeReplicaLoad(AsSpan(parts[0]));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->replica, m.replica);
  EXPECT_EQ(decoded->epoch, 7u);
  EXPECT_EQ(decoded->seq, 100u);
  EXPECT_EQ(decoded->kind, core::RemoteLoadKind::kSnapshot);
  EXPECT_EQ(decoded->ts_ms, 123456u);
  ASSERT_EQ(decoded->targets.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(decoded->targets[i].worker_id, m.targets[i].worker_id);
    EXPECT_EQ(decoded->targets[i].dp_rank, m.targets[i].dp_rank);
    EXPECT_EQ(decoded->targets[i].active_blocks, m.targets[i].active_blocks);
    EXPECT_DOUBLE_EQ(decoded->targets[i].pending_prefill_blocks,
                     m.targets[i].pending_prefill_blocks);
    EXPECT_EQ(decoded->targets[i].demand_tokens, m.targets[i].demand_tokens);
    EXPECT_EQ(decoded->targets[i].demand_requests, 2);
  }
  core::RemoteLoadMessage empty = Message(0);
  empty.kind = core::RemoteLoadKind::kDelta;
  parts = EncodeReplicaLoad(empty);
  ASSERT_EQ(parts.size(), 1u);
  decoded = DecodeReplicaLoad(AsSpan(parts[0]));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->kind, core::RemoteLoadKind::kDelta);
  EXPECT_TRUE(decoded->targets.empty());
}

TEST(ReplicaLoadWireTest, ALargeSnapshotSplitsIntoConsecutivePartsTheReceiverJoins) {
  core::RemoteLoadMessage m = Message(3000);                                       // about 100 KiB
  for (core::RemoteTargetLoad& t : m.targets) t.demand_tokens = -t.demand_tokens;  // totals >= 0
  m.targets.back().active_blocks = 5;  // every part ends up in the totals
  std::vector<std::string> parts = EncodeReplicaLoad(m);
  ASSERT_GE(parts.size(), 2u);
  core::RemoteLoad remote;
  size_t targets = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_LE(parts[i].size(), kReplicaLoadMaxBytes);
    auto decoded = DecodeReplicaLoad(AsSpan(parts[i]));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->seq, 100 + i);
    targets += decoded->targets.size();
    EXPECT_EQ(remote.Apply(*decoded, 0), core::RemoteApply::kApplied);
  }
  EXPECT_EQ(targets, 3000u);
  EXPECT_EQ(remote.Totals({"10.0.0.0:8000", 0}).active_blocks, 0);
  EXPECT_EQ(remote.Totals({"10.0.0.2999:8000", 2999 % 3}).active_blocks, 5);
  EXPECT_EQ(remote.Totals({"10.0.0.1500:8000", 0}).active_blocks, 1500000);
}

TEST(ReplicaLoadWireTest, EveryTruncationAndCorruptionIsAnErrorNotACrash) {
  std::string good = EncodeReplicaLoad(Message(4))[0];
  for (size_t n = 0; n < good.size(); ++n) {
    auto decoded = DecodeReplicaLoad(AsSpan(good.substr(0, n)));
    EXPECT_FALSE(decoded.ok()) << n;
    if (!decoded.ok()) {
      EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  // Flipping any byte never crashes (it may still decode: a changed value).
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    (void)DecodeReplicaLoad(AsSpan(bad));
  }
  EXPECT_FALSE(DecodeReplicaLoad(AsSpan(good + "x")).ok());             // trailing bytes
  EXPECT_FALSE(DecodeReplicaLoad(AsSpan(good), good.size() - 1).ok());  // over the limit
  EXPECT_FALSE(DecodeReplicaLoad(AsSpan(std::string(kReplicaLoadMaxBytes + 1, '\x90'))).ok());
}

TEST(ReplicaLoadWireTest, MissingKeysBadKindAndBadTargetsAreRejectedUnknownKeysSkipped) {
  // Hand-built maps (msgpack): {"v":1,"replica":"a","epoch":1,"seq":1,"kind":K,"targets":T}
  auto map = [](std::string kind, std::string targets, std::string extra = "", uint8_t fields = 6) {
    std::string s(1, static_cast<char>(0x80 | fields));
    s += "\xa1v\x01";
    s += "\xa7replica\xa1"
         "a";
    s += "\xa5"
         "epoch\x01";
    s += "\xa3seq\x01";
    s += "\xa4kind" + kind;
    s += "\xa7targets" + targets;
    return s + extra;
  };
  const std::string delta =
      "\xa5"
      "delta";
  // [["w", 0, 1, 0.0 as int 0, 0, 0]]
  const std::string one = std::string("\x91\x96\xa1w\x00\x01\x00\x00\x00", 9);
  auto ok = DecodeReplicaLoad(AsSpan(map(delta, one)));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->targets[0].active_blocks, 1);
  EXPECT_TRUE(DecodeReplicaLoad(AsSpan(map(delta, one,
                                          "\xa5"
                                          "extra\x92\x01\x02",
                                          7)))
                  .ok());
  EXPECT_FALSE(DecodeReplicaLoad(AsSpan(map("\xa4huge", one))).ok());
  EXPECT_FALSE(
      DecodeReplicaLoad(AsSpan(map(delta, std::string("\x91\x92\xa1w\x00", 5)))).ok());  // width 2
  EXPECT_FALSE(
      DecodeReplicaLoad(AsSpan(map(delta, std::string("\x91\x96\x01\x00\x01\x00\x00\x00", 8))))
          .ok());
  EXPECT_FALSE(DecodeReplicaLoad(AsSpan(map(delta, "\xdd\xff\xff\xff\xff"))).ok());  // forged
  std::string missing = map(delta, one, "", 6);
  missing[0] = static_cast<char>(0x85);  // the map ends before "targets"
  EXPECT_FALSE(DecodeReplicaLoad(AsSpan(missing)).ok());
  EXPECT_FALSE(DecodeReplicaLoad(AsSpan(std::string("\x93\x01\x02\x03"))).ok());  // not a map
}

}  // namespace
}  // namespace infera::events
