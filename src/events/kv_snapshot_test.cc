#include "events/kv_snapshot.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/hashing.h"

namespace infera::events {
namespace {

constexpr char kPath[] = "/snap/kv.snap";
constexpr int64_t kNowMs = 1'700'000'000'000;

// An in-memory file system whose operations can be made to fail.
class FakeFs final : public SnapshotFs {
 public:
  std::map<std::string, std::vector<uint8_t>> files;
  size_t space_bytes = SIZE_MAX;  // past it writes fail with ENOSPC
  bool short_write = false;       // each write takes half; the second one fails
  bool fail_fsync = false;
  bool fail_rename = false;
  std::vector<int> alive_pids;

  class File final : public SnapshotFile {
   public:
    File(FakeFs& fs, std::string path) : fs_(fs), path_(std::move(path)) {}
    absl::StatusOr<size_t> Write(const void* data, size_t size) override {
      std::vector<uint8_t>& f = fs_.files[path_];
      if (fs_.short_write) {
        if (++writes_ > 1) return absl::ResourceExhaustedError("short write");
        size = size / 2 + 1;
      }
      if (f.size() + size > fs_.space_bytes) return absl::ResourceExhaustedError("ENOSPC");
      const auto* p = static_cast<const uint8_t*>(data);
      f.insert(f.end(), p, p + size);
      return size;
    }
    absl::Status Sync() override {
      return fs_.fail_fsync ? absl::DataLossError("EIO") : absl::OkStatus();
    }
    absl::Status Close() override { return absl::OkStatus(); }

   private:
    FakeFs& fs_;
    std::string path_;
    int writes_ = 0;
  };
  class Mapped final : public MappedSnapshot {
   public:
    explicit Mapped(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
    const uint8_t* data() const override { return bytes_.data(); }
    size_t size() const override { return bytes_.size(); }

   private:
    std::vector<uint8_t> bytes_;
  };

  absl::StatusOr<std::unique_ptr<SnapshotFile>> CreateExclusive(const std::string& path) override {
    if (files.contains(path)) return absl::AlreadyExistsError(path);
    files[path];
    return std::make_unique<File>(*this, path);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (fail_rename) return absl::PermissionDeniedError("EACCES");
    files[to] = std::move(files.at(from));
    files.erase(from);
    return absl::OkStatus();
  }
  absl::Status SyncDir(const std::string&) override { return absl::OkStatus(); }
  absl::Status Unlink(const std::string& path) override {
    return files.erase(path) ? absl::OkStatus() : absl::NotFoundError(path);
  }
  absl::StatusOr<std::unique_ptr<MappedSnapshot>> Map(const std::string& path) override {
    auto it = files.find(path);
    if (it == files.end()) return absl::NotFoundError(path);
    return std::make_unique<Mapped>(it->second);
  }
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    std::vector<std::string> names;
    for (const auto& [path, bytes] : files) {
      if (SnapshotDir(path) == dir) names.push_back(path.substr(dir.size() + 1));
    }
    return names;
  }
  bool ProcessAlive(int pid) override {
    return std::find(alive_pids.begin(), alive_pids.end(), pid) != alive_pids.end();
  }
};

SnapshotHeader Header() {
  return {.hash_scheme = core::kHashSchemeVersion,
          .created_unix_ms = kNowMs - 5000,
          .writer_instance = 0xabcdef,
          .salted_traffic = true,
          .fleet_id = "fleet-a"};
}

SnapshotExpect Expect() {
  return {.hash_scheme = core::kHashSchemeVersion, .fleet_id = "fleet-a", .now_unix_ms = kNowMs};
}

// A record of `n` blocks: a chain, an aliased block, an orphan.
SnapshotRecord Record(std::string worker, uint32_t rank, size_t n) {
  SnapshotRecord r;
  r.key = {std::move(worker), rank};
  r.block_size = 16;
  r.position = {.has_position = true,
                .complete = rank % 2 == 0,
                .last_seq = 40 + rank,
                .last_payload_xxh3 = 0x1234 + rank};
  r.view.max_blocks = 1000;
  r.view.evicted_blocks = 7;
  r.view.evicted_since_clear = true;
  for (size_t i = 0; i < n; ++i) {
    core::ViewBlock b;
    b.router_hash = 1000 * (rank + 1) + i;
    b.parent = i == 0 ? core::kViewParentRoot
                      : (i == n - 1 && n > 2 ? core::kViewParentUnknown : uint32_t(i - 1));
    b.recency = static_cast<uint32_t>(i % 32);
    b.tiers = i % 3 == 0 ? 3 : 1;
    b.engine_begin = static_cast<uint32_t>(r.view.engine_hashes.size());
    b.engine_count = i == 1 ? 2 : 1;
    for (int e = 0; e < b.engine_count; ++e) r.view.engine_hashes.push_back(77 * i + e);
    r.view.blocks.push_back(b);
  }
  return r;
}

absl::Status Write(FakeFs& fs, const std::vector<SnapshotRecord>& records,
                   SnapshotHeader header = Header()) {
  SnapshotWriter w(fs, kPath, 42);
  absl::Status s = w.Begin(header);
  for (const SnapshotRecord& r : records) {
    if (s.ok()) s = w.AddRecord(r);
  }
  if (s.ok()) s = w.Finish(/*distinct_hash_count=*/99, /*begin_stream_seq=*/5);
  return s;
}

void Rechecksum(std::vector<uint8_t>& f) {
  uint64_t sum = XXH3_64bits(f.data(), f.size() - 16);
  for (int i = 0; i < 8; ++i) f[f.size() - 16 + i] = static_cast<uint8_t>(sum >> (8 * i));
}

void ExpectSame(const SnapshotRecord& a, const SnapshotRecord& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.block_size, b.block_size);
  EXPECT_EQ(a.position.has_position, b.position.has_position);
  EXPECT_EQ(a.position.complete, b.position.complete);
  EXPECT_EQ(a.position.last_seq, b.position.last_seq);
  EXPECT_EQ(a.position.last_payload_xxh3, b.position.last_payload_xxh3);
  EXPECT_EQ(a.view.max_blocks, b.view.max_blocks);
  EXPECT_EQ(a.view.evicted_blocks, b.view.evicted_blocks);
  EXPECT_EQ(a.view.evicted_since_clear, b.view.evicted_since_clear);
  EXPECT_EQ(a.view.blocks, b.view.blocks);
  EXPECT_EQ(a.view.engine_hashes, b.view.engine_hashes);
}

class SnapshotRoundTrip : public ::testing::TestWithParam<int> {};

TEST_P(SnapshotRoundTrip, ReadsBackWhatWasWritten) {
  FakeFs fs;
  std::vector<SnapshotRecord> records;
  for (int t = 0; t < GetParam(); ++t) records.push_back(Record("w" + std::to_string(t), t, 3 + t));
  ASSERT_TRUE(Write(fs, records).ok());
  EXPECT_FALSE(fs.files.contains(std::string(kPath) + ".tmp.42"));

  SnapshotReader reader = SnapshotReader::Open(fs, kPath, Expect());
  ASSERT_EQ(reader.result(), LoadResult::kLoaded) << reader.detail();
  EXPECT_EQ(reader.header().created_unix_ms, kNowMs - 5000);
  EXPECT_EQ(reader.header().writer_instance, 0xabcdefu);
  EXPECT_TRUE(reader.header().salted_traffic);
  EXPECT_EQ(reader.header().fleet_id, "fleet-a");
  EXPECT_EQ(reader.footer().target_count, static_cast<uint32_t>(GetParam()));
  EXPECT_EQ(reader.footer().distinct_hash_count, 99u);
  EXPECT_EQ(reader.footer().begin_stream_seq, 5u);
  uint64_t blocks = 0;
  for (const SnapshotRecord& r : records) blocks += r.view.blocks.size();
  EXPECT_EQ(reader.footer().block_count, blocks);
  ASSERT_EQ(reader.record_count(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    SnapshotRecord got;
    reader.ReadRecord(i, got);
    ExpectSame(got, records[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, SnapshotRoundTrip, ::testing::Values(0, 1, 3));

TEST(SnapshotFile, LongFleetIdIsStoredAsItsDigest) {
  std::string long_id(100, 'f');
  EXPECT_EQ(StoredFleetId(long_id).size(), 18u);
  EXPECT_TRUE(StoredFleetId(long_id).starts_with("x:"));
  FakeFs fs;
  SnapshotHeader h = Header();
  h.fleet_id = long_id;
  ASSERT_TRUE(Write(fs, {Record("w", 0, 2)}, h).ok());
  SnapshotExpect e = Expect();
  e.fleet_id = long_id;
  EXPECT_EQ(SnapshotReader::Open(fs, kPath, e).result(), LoadResult::kLoaded);
}

// --- refusals (§7): each flips exactly one thing ---

struct Refusal {
  LoadResult result;
  std::string detail;
};

Refusal LoadAfter(const std::function<void(std::vector<uint8_t>&, SnapshotExpect&)>& flip) {
  FakeFs fs;
  EXPECT_TRUE(Write(fs, {Record("a", 0, 4), Record("b", 1, 3)}).ok());
  SnapshotExpect expect = Expect();
  flip(fs.files.at(kPath), expect);
  SnapshotReader reader = SnapshotReader::Open(fs, kPath, expect);
  EXPECT_EQ(reader.record_count(), 0u);
  return {reader.result(), reader.detail()};
}

TEST(SnapshotRefusal, Absent) {
  FakeFs fs;
  EXPECT_EQ(SnapshotReader::Open(fs, kPath, Expect()).result(), LoadResult::kAbsent);
}

TEST(SnapshotRefusal, BadMagic) {
  Refusal r = LoadAfter([](auto& f, auto&) { f[0] = 'X'; });
  EXPECT_EQ(r.result, LoadResult::kRefusedCorrupt);
  EXPECT_NE(r.detail.find("not a snapshot"), std::string::npos);
}

TEST(SnapshotRefusal, OtherFormatVersion) {
  Refusal r = LoadAfter([](auto& f, auto&) { f[8] = 2; });
  EXPECT_EQ(r.result, LoadResult::kRefusedVersion);
  EXPECT_EQ(r.detail, "version 2, this router reads 1");
}

TEST(SnapshotRefusal, OtherHashScheme) {
  Refusal r = LoadAfter([](auto&, auto& e) { e.hash_scheme += 1; });
  EXPECT_EQ(r.result, LoadResult::kRefusedVersion);
}

TEST(SnapshotRefusal, OtherTransport) {
  Refusal r = LoadAfter([](auto&, auto& e) { e.transport = SnapshotTransport::kNats; });
  EXPECT_EQ(r.result, LoadResult::kRefusedFleet);
  EXPECT_EQ(r.detail, "written for zmq, running nats");
}

TEST(SnapshotRefusal, OtherFleet) {
  Refusal r = LoadAfter([](auto&, auto& e) { e.fleet_id = "fleet-b"; });
  EXPECT_EQ(r.result, LoadResult::kRefusedFleet);
  EXPECT_EQ(r.detail, "fleet 'fleet-a' != 'fleet-b'");
}

TEST(SnapshotRefusal, TooOld) {
  Refusal r = LoadAfter([](auto&, auto& e) { e.now_unix_ms += 900'000; });
  EXPECT_EQ(r.result, LoadResult::kRefusedStale);
  EXPECT_EQ(r.detail, "age 905 s > max 900 s");
}

TEST(SnapshotRefusal, CreatedInTheFuture) {
  Refusal r = LoadAfter([](auto&, auto& e) { e.now_unix_ms -= 300'000; });
  EXPECT_EQ(r.result, LoadResult::kRefusedStale);
  EXPECT_EQ(r.detail, "created 295 s in the future");
}

TEST(SnapshotRefusal, AnyFlippedByteFailsTheChecksum) {
  for (size_t offset : {size_t{200}, size_t{130}}) {
    Refusal r = LoadAfter([&](auto& f, auto&) { f[offset] ^= 0x10; });
    EXPECT_EQ(r.result, LoadResult::kRefusedChecksum) << offset;
  }
}

TEST(SnapshotRefusal, BadStructureWithGoodChecksum) {
  // The first record's first block's parent (offset: header, "TREC", id length, id "a",
  // 53 fixed bytes, router hash) now points at itself.
  Refusal r = LoadAfter([](auto& f, auto&) {
    size_t parent = kSnapshotHeaderBytes + 4 + 2 + 1 + 53 + 8;
    f[parent] = 0;
    f[parent + 1] = f[parent + 2] = f[parent + 3] = 0;
    Rechecksum(f);
  });
  EXPECT_EQ(r.result, LoadResult::kRefusedCorrupt);
  EXPECT_EQ(r.detail, "record 0: parent 0 >= 0");
}

TEST(SnapshotRefusal, RecordMagicAndFooterCounts) {
  Refusal magic = LoadAfter([](auto& f, auto&) {
    f[kSnapshotHeaderBytes] = 'X';
    Rechecksum(f);
  });
  EXPECT_EQ(magic.result, LoadResult::kRefusedCorrupt);
  Refusal count = LoadAfter([](auto& f, auto&) {
    f[f.size() - kSnapshotFooterBytes] = 3;  // target_count
    Rechecksum(f);
  });
  EXPECT_EQ(count.result, LoadResult::kRefusedCorrupt);
  EXPECT_EQ(count.detail, "record 2: footer says 3 targets");
}

TEST(SnapshotRefusal, HugeLengthsStayInBounds) {
  Refusal r = LoadAfter([](auto& f, auto&) {
    f[kSnapshotHeaderBytes + 4] = f[kSnapshotHeaderBytes + 5] = 0xFF;  // worker id length
    Rechecksum(f);
  });
  EXPECT_EQ(r.result, LoadResult::kRefusedCorrupt);
}

TEST(SnapshotRefusal, Truncated) {
  Refusal r = LoadAfter([](auto& f, auto&) { f.resize(f.size() - 20); });
  EXPECT_EQ(r.result, LoadResult::kRefusedCorrupt);
  Refusal tiny = LoadAfter([](auto& f, auto&) { f.resize(100); });
  EXPECT_EQ(tiny.result, LoadResult::kRefusedCorrupt);
  EXPECT_EQ(tiny.detail, "not a snapshot (size 100)");
}

// --- write faults (§5.2): P keeps its bytes, the temp file is gone ---

void ExpectFaultLeavesOldFile(const std::function<void(FakeFs&)>& fault, std::string_view op) {
  FakeFs fs;
  ASSERT_TRUE(Write(fs, {Record("old", 0, 3)}).ok());
  std::vector<uint8_t> old = fs.files.at(kPath);
  fault(fs);
  std::vector<SnapshotRecord> big;
  for (int t = 0; t < 8; ++t) big.push_back(Record("new" + std::to_string(t), t, 20'000));
  absl::Status s = Write(fs, big);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(std::string(s.message()).starts_with(op)) << s;
  EXPECT_EQ(fs.files.at(kPath), old);
  EXPECT_EQ(fs.files.size(), 1u);
}

TEST(SnapshotWriteFault, ShortWrite) {
  ExpectFaultLeavesOldFile([](FakeFs& fs) { fs.short_write = true; }, "write");
}
TEST(SnapshotWriteFault, NoSpace) {
  ExpectFaultLeavesOldFile([](FakeFs& fs) { fs.space_bytes = 3'000'000; }, "write");
}
TEST(SnapshotWriteFault, Fsync) {
  ExpectFaultLeavesOldFile([](FakeFs& fs) { fs.fail_fsync = true; }, "fsync");
}
TEST(SnapshotWriteFault, Rename) {
  ExpectFaultLeavesOldFile([](FakeFs& fs) { fs.fail_rename = true; }, "rename");
}

TEST(SnapshotWriter, AbandonedWriteLeavesNoTempFile) {
  FakeFs fs;
  {
    SnapshotWriter w(fs, kPath, 42);
    ASSERT_TRUE(w.Begin(Header()).ok());
    ASSERT_TRUE(w.AddRecord(Record("a", 0, 3)).ok());
    EXPECT_TRUE(fs.files.contains(w.temp_path()));
  }
  EXPECT_TRUE(fs.files.empty());
}

TEST(SnapshotWriter, StaleTempsOfDeadProcessesAreRemoved) {
  FakeFs fs;
  fs.files["/snap/kv.snap"] = {1};
  fs.files["/snap/kv.snap.tmp.7"] = {1};   // dead
  fs.files["/snap/kv.snap.tmp.8"] = {1};   // alive: another router's write
  fs.files["/snap/kv.snap.tmp.42"] = {1};  // our own pid: an earlier life's
  fs.files["/snap/other.tmp.7"] = {1};     // not ours
  fs.alive_pids = {8, 42};
  EXPECT_EQ(RemoveStaleSnapshotTemps(fs, kPath, 42), 2u);
  EXPECT_TRUE(fs.files.contains("/snap/kv.snap"));
  EXPECT_TRUE(fs.files.contains("/snap/kv.snap.tmp.8"));
  EXPECT_TRUE(fs.files.contains("/snap/other.tmp.7"));
  EXPECT_EQ(fs.files.size(), 3u);
}

}  // namespace
}  // namespace infera::events
