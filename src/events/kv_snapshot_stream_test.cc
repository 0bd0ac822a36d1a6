// SnapshotStreamBuild (doc/snapshot.md §9.1, streamed build): a file's bytes fed in the
// order a peer fetch receives them (the footer's chunk first, then the rest in order)
// build the same staging index as the build from the whole checked file; a stream that
// stops, or whose bytes are bad, is never taken for the checked file.
#include "events/kv_snapshot_stream.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/hashing.h"
#include "events/kv_snapshot_peer.h"
#include "events/kv_snapshotter.h"

namespace infera::events {
namespace {

constexpr char kFleet[] = "stream-fleet";

// Target t holds a chain of `n` blocks; chains share their first blocks (shared rows).
// `duplicate`: its last block repeats a router hash (parses, but RestoreView refuses).
SnapshotRecord Chain(uint32_t t, size_t n, bool duplicate = false) {
  SnapshotRecord r;
  r.key = {"worker-" + std::to_string(t), t % 4};
  r.block_size = 16;
  r.position = {.has_position = true, .complete = true, .last_seq = 10 + t};
  for (size_t i = 0; i < n; ++i) {
    core::ViewBlock b;
    b.router_hash = i < 3 ? 500 + i : 100'000 * (t + 1) + i;
    if (duplicate && i == n - 1) b.router_hash = r.view.blocks[0].router_hash;
    b.parent = i == 0 ? core::kViewParentRoot : static_cast<uint32_t>(i - 1);
    b.tiers = 1;
    b.engine_begin = static_cast<uint32_t>(r.view.engine_hashes.size());
    b.engine_count = 1;
    r.view.engine_hashes.push_back(7 * b.router_hash);
    r.view.blocks.push_back(b);
  }
  return r;
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::vector<uint8_t> bytes;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return bytes;
  uint8_t buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;)
    bytes.insert(bytes.end(), buf, buf + n);
  std::fclose(f);
  return bytes;
}

class StreamBuild : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kv_snapshot_stream_" + std::to_string(getpid());
    std::remove(Path().c_str());
    std::remove(Received().c_str());
  }
  void TearDown() override {
    std::remove(Path().c_str());
    std::remove(Received().c_str());
  }
  std::string Path() const { return dir_ + ".snap"; }
  std::string Received() const { return dir_ + ".received"; }
  KvSnapshotOptions Options() const { return {.path = Path(), .fleet_id = kFleet}; }

  // Writes the file: 12 targets of 0..60 blocks, the fifth's view refused by RestoreView.
  std::vector<uint8_t> WriteFile() {
    PosixSnapshotFs fs;
    SnapshotWriter w(fs, Path(), getpid());
    absl::Status s = w.Begin({.hash_scheme = core::kHashSchemeVersion,
                              .created_unix_ms = SnapshotNowMs(),
                              .salted_traffic = true,
                              .fleet_id = kFleet});
    for (uint32_t t = 0; t < 12 && s.ok(); ++t) s = w.AddRecord(Chain(t, t * 5, t == 4));
    if (s.ok()) s = w.Finish(/*distinct_hash_count=*/400);
    EXPECT_TRUE(s.ok()) << s;
    return ReadAll(Path());
  }
  static int64_t SnapshotNowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // Feeds `bytes` into a build over the file at Received() as a fetch would, `chunk`
  // bytes a chunk, up to (not including) chunk `stop_at` of the in-order part.
  std::unique_ptr<SnapshotStreamBuild> Feed(const std::vector<uint8_t>& bytes, size_t chunk,
                                            size_t stop_at = SIZE_MAX) {
    const int fd = open(Received().c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes.size())), 0);
    auto build = std::make_unique<SnapshotStreamBuild>(fd, bytes.size());
    const size_t chunks = (bytes.size() + chunk - 1) / chunk;
    const size_t footer_chunk = (bytes.size() - kSnapshotFooterBytes) / chunk;
    auto write = [&](size_t c) {
      const size_t n = std::min(chunk, bytes.size() - c * chunk);
      EXPECT_EQ(pwrite(fd, bytes.data() + c * chunk, n, static_cast<off_t>(c * chunk)),
                static_cast<ssize_t>(n));
    };
    for (size_t c = footer_chunk; c < chunks; ++c) write(c);
    build->Received(0, true);
    for (size_t c = 0; c < std::min(footer_chunk, stop_at); ++c) {
      write(c);
      build->Received((c + 1) * chunk, true);
    }
    if (stop_at >= footer_chunk) build->Received(bytes.size(), true);
    close(fd);  // the build's mapping stays
    return build;
  }

  SnapshotReader Check(const std::string& path) {
    PosixSnapshotFs fs;
    return SnapshotReader::Open(fs, path,
                                {.hash_scheme = core::kHashSchemeVersion,
                                 .fleet_id = kFleet,
                                 .now_unix_ms = SnapshotNowMs()});
  }

  // The index KvSnapshotLoad builds from the file alone, and which records failed.
  core::KvIndex FromFile(std::vector<core::TargetId>& failed) {
    auto stats = std::make_shared<KvSnapshotStats>();
    auto load = KvSnapshotLoad::Open(Options(), SnapshotTransport::kZmq, stats);
    EXPECT_NE(load, nullptr);
    return load->Build(failed);
  }

  std::string dir_;
};

void ExpectSameIndex(const core::KvIndex& a, const core::KvIndex& b) {
  ASSERT_EQ(a.Targets(), b.Targets());
  EXPECT_EQ(a.SaltedTraffic(), b.SaltedTraffic());
  for (core::TargetId id : a.Targets()) {
    EXPECT_EQ(a.Key(id), b.Key(id));
    core::TargetView va, vb;
    a.ExportView(id, va);
    b.ExportView(id, vb);
    EXPECT_EQ(va.blocks, vb.blocks) << a.Key(id).ToString();
    EXPECT_EQ(va.engine_hashes, vb.engine_hashes);
  }
}

TEST_F(StreamBuild, ChunksInFetchOrderBuildTheFilesIndex) {
  const std::vector<uint8_t> bytes = WriteFile();
  std::vector<core::TargetId> file_failed;
  const core::KvIndex from_file = FromFile(file_failed);
  ASSERT_EQ(file_failed, std::vector<core::TargetId>{4});
  // 37-byte chunks: records and the footer straddle chunks; 4096: a few chunks.
  for (size_t chunk : {size_t{37}, size_t{4096}}) {
    SCOPED_TRACE(chunk);
    SnapshotStreamBuild::Result r = Feed(bytes, chunk)->Finish();
    EXPECT_TRUE(r.complete) << r.error;
    EXPECT_EQ(r.offsets, Check(Received()).record_offsets());
    EXPECT_EQ(r.failed, file_failed);
    ExpectSameIndex(r.staging, from_file);
  }
}

TEST_F(StreamBuild, TheLoadTakesTheStreamedIndexForTheCheckedFile) {
  const std::vector<uint8_t> bytes = WriteFile();
  std::vector<core::TargetId> file_failed;
  const core::KvIndex from_file = FromFile(file_failed);
  auto stats = std::make_shared<KvSnapshotStats>();
  auto load = KvSnapshotLoad::Open(Options(), SnapshotTransport::kZmq, stats, Check(Path()),
                                   Feed(bytes, 512));
  ASSERT_NE(load, nullptr);
  std::vector<core::TargetId> failed;
  const core::KvIndex staging = load->Build(failed);
  EXPECT_EQ(failed, file_failed);
  EXPECT_EQ(stats->refused_corrupt.load(), 1u);
  EXPECT_GT(stats->restored_blocks.load(), 0u);
  ExpectSameIndex(staging, from_file);
}

TEST_F(StreamBuild, AStreamThatStopsEndsIncompleteAndTheLoadBuildsFromTheFile) {
  const std::vector<uint8_t> bytes = WriteFile();
  std::vector<core::TargetId> file_failed;
  const core::KvIndex from_file = FromFile(file_failed);
  // Finish before the last chunks came (a fetch cut short): no wait for them.
  SnapshotStreamBuild::Result r = Feed(bytes, 256, /*stop_at=*/3)->Finish();
  EXPECT_FALSE(r.complete);
  EXPECT_LT(r.offsets.size(), 12u);
  // A load given such a build rebuilds from the checked file.
  auto stats = std::make_shared<KvSnapshotStats>();
  auto load = KvSnapshotLoad::Open(Options(), SnapshotTransport::kZmq, stats, Check(Path()),
                                   Feed(bytes, 256, /*stop_at=*/3));
  std::vector<core::TargetId> failed;
  ExpectSameIndex(load->Build(failed), from_file);
  EXPECT_EQ(failed, file_failed);
  // Destroyed while waiting for bytes (an abandoned offer): returns.
  Feed(bytes, 256, /*stop_at=*/1).reset();
}

TEST_F(StreamBuild, ACorruptChunkMidStreamIsNeverTakenForTheCheckedFile) {
  std::vector<uint8_t> bytes = WriteFile();
  const SnapshotReader good = Check(Path());
  ASSERT_EQ(good.result(), LoadResult::kLoaded);
  // A record magic broken in the middle of the stream: the build stops there.
  std::vector<uint8_t> bad_magic = bytes;
  bad_magic[good.record_offsets()[6]] ^= 0xff;
  SnapshotStreamBuild::Result r = Feed(bad_magic, 128)->Finish();
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.offsets.size(), 6u);
  EXPECT_NE(r.error.find("record 6: bad record magic"), std::string::npos) << r.error;
  EXPECT_NE(Check(Received()).result(), LoadResult::kLoaded);  // the fetch refuses it
  // A flipped hash: every record parses and the build completes, but the file's check
  // refuses the bytes (the fetch then drops the build and tries the next offer), and a
  // load given it with another file's checked reader does not take it.
  std::vector<uint8_t> bad_hash = bytes;
  bad_hash[good.record_offsets()[9] + 100] ^= 0x01;
  std::unique_ptr<SnapshotStreamBuild> build = Feed(bad_hash, 128);
  EXPECT_EQ(Check(Received()).result(), LoadResult::kRefusedChecksum);
  EXPECT_TRUE(build->Finish().complete);
  std::vector<core::TargetId> file_failed;
  const core::KvIndex from_file = FromFile(file_failed);
  // Bytes of another shape (a record shorter): offsets differ from the checked file's.
  std::vector<uint8_t> other = bytes;
  other.erase(other.begin() + static_cast<ptrdiff_t>(good.record_offsets()[1]),
              other.begin() + static_cast<ptrdiff_t>(good.record_offsets()[2]));
  auto stats = std::make_shared<KvSnapshotStats>();
  auto load = KvSnapshotLoad::Open(Options(), SnapshotTransport::kZmq, stats, Check(Path()),
                                   Feed(other, 128));
  std::vector<core::TargetId> failed;
  ExpectSameIndex(load->Build(failed), from_file);
  EXPECT_EQ(failed, file_failed);
}

// The peer server checks each file written once, after the write (Prepare, as the
// snapshotter's after_write calls it), not at the next offer: a file it checked is not
// checked again, a refused one is not kept, a new file (another inode) is.
TEST_F(StreamBuild, PeerServerChecksEachWrittenFileOnce) {
  SnapshotPeerServer server({.path = Path(), .fleet_id = kFleet, .instance = 1});
  server.Prepare();  // no file yet
  EXPECT_EQ(server.checks(), 0u);
  WriteFile();
  server.Prepare();
  EXPECT_EQ(server.checks(), 1u);
  server.Prepare();  // the same file: nothing to check
  EXPECT_EQ(server.checks(), 1u);
  WriteFile();  // renamed over the path: another file
  server.Prepare();
  EXPECT_EQ(server.checks(), 2u);
  SnapshotPeerServer other_fleet({.path = Path(), .fleet_id = "other", .instance = 2});
  other_fleet.Prepare();  // refused (another fleet): checked, not kept, so checked again
  other_fleet.Prepare();
  EXPECT_EQ(other_fleet.checks(), 2u);
}

// The snapshotter runs after_write once per file written, after its rename.
TEST_F(StreamBuild, SnapshotterRunsAfterWriteForEachFileWritten) {
  auto stats = std::make_shared<KvSnapshotStats>();
  std::atomic<int> written{0};
  std::atomic<bool> at_path{false};
  stats->after_write = [&] {
    written.fetch_add(1);
    at_path = Check(Path()).result() == LoadResult::kLoaded;
  };
  KvSnapshotter snapshotter(Options(), stats);
  for (int cycle = 0; cycle < 2; ++cycle) {
    snapshotter.Begin({.hash_scheme = core::kHashSchemeVersion,
                       .salted_traffic = true,
                       .fleet_id = kFleet},
                      /*distinct_hash_count=*/100, /*now_ns=*/0);
    snapshotter.Push({Chain(0, 10), Chain(1, 20)});
    snapshotter.End(/*now_ns=*/0);
    ASSERT_TRUE(snapshotter.WaitIdle(10'000));
    EXPECT_EQ(written.load(), cycle + 1);
    EXPECT_TRUE(at_path.load());
  }
  snapshotter.Begin({.hash_scheme = core::kHashSchemeVersion, .fleet_id = kFleet}, 100, 0);
  snapshotter.Abort(0);  // nothing written: not called
  ASSERT_TRUE(snapshotter.WaitIdle(10'000));
  EXPECT_EQ(written.load(), 2);
}

}  // namespace
}  // namespace infera::events
