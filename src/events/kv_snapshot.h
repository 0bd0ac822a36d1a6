// KV-view snapshot files, version 1 (doc/snapshot.md §4): the writer and the reader.
//
// A file is `header (128 B) | target records... | footer (48 B)`, little-endian; the
// footer's XXH3-64 covers every byte before it. SnapshotWriter streams records into
// `P.tmp.<pid>` (O_EXCL, 0600) and, on Finish, fsyncs it, renames it to P and fsyncs the
// directory; any failure unlinks the temp file and leaves P as it was (§5.2).
// SnapshotReader maps P and refuses the whole file on any check of §7 (magic, version,
// hash scheme, transport, fleet, age, checksum, structure) with a reason; the file is
// untrusted input: nothing in it can make the reader read out of bounds.
//
// Every effect on the file system goes through SnapshotFs (PosixSnapshotFs in
// production; tests inject faults).
//
// Thread-safety: a writer or reader is used by one thread at a time.
//
// Example:
//   PosixSnapshotFs fs;
//   SnapshotWriter w(fs, "/var/lib/infera/kv.snap", getpid());
//   absl::Status s = w.Begin(header);
//   for (const SnapshotRecord& r : records) if (s.ok()) s = w.AddRecord(r);
//   if (s.ok()) s = w.Finish({.distinct_hash_count = rows});
//
//   SnapshotReader reader = SnapshotReader::Open(fs, path, expect);
//   if (reader.result() == LoadResult::kLoaded)
//     for (size_t i = 0; i < reader.record_count(); ++i) reader.ReadRecord(i, record);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_index.h"
#include "core/types.h"

namespace infera::events {

struct SnapshotHashState;  // streaming XXH3 (kv_snapshot.cc)

inline constexpr uint32_t kSnapshotFormatVersion = 1;
inline constexpr size_t kSnapshotHeaderBytes = 128;
inline constexpr size_t kSnapshotFooterBytes = 48;
inline constexpr size_t kSnapshotFleetIdMaxBytes = 80;

enum class SnapshotTransport : uint8_t { kZmq = 0, kNats = 1 };

// The fleet id as stored and compared (§4.1): ids over 80 bytes become "x:" + the 16
// hex digits of their XXH3-64 (seed 0).
std::string StoredFleetId(std::string_view fleet_id);

struct SnapshotHeader {
  uint32_t format_version = kSnapshotFormatVersion;
  uint32_t hash_scheme = 0;
  int64_t created_unix_ms = 0;
  uint64_t writer_instance = 0;
  SnapshotTransport transport = SnapshotTransport::kZmq;
  bool salted_traffic = false;
  uint64_t nats_stream_created_ns = 0;
  std::string fleet_id;  // as given; written in its stored form
};

// A target's stream position at export (§4.3).
struct SnapshotPosition {
  bool has_position = false;  // the target had applied at least one batch
  bool complete = false;
  uint64_t last_seq = 0;
  uint64_t last_payload_xxh3 = 0;  // ZMQ epoch check (§6.2)
  uint64_t stream_seq = 0;         // NATS only
};

// One target's record.
struct SnapshotRecord {
  core::TargetKey key;
  uint32_t block_size = 0;
  SnapshotPosition position;
  core::TargetView view;  // max_blocks, evicted count and flag, blocks parents-first
};

struct SnapshotFooter {
  uint32_t target_count = 0;
  uint64_t block_count = 0;
  uint64_t distinct_hash_count = 0;  // rows to reserve on restore
  uint64_t begin_stream_seq = 0;     // NATS only
  uint64_t checksum = 0;
};

// The file system as the snapshot code uses it.
class SnapshotFile {
 public:
  virtual ~SnapshotFile() = default;
  // Writes some of `data`: returns how many bytes (0 < n <= size), or an error.
  virtual absl::StatusOr<size_t> Write(const void* data, size_t size) = 0;
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
};

// A read-only view of a whole file; unmapped when destroyed.
class MappedSnapshot {
 public:
  virtual ~MappedSnapshot() = default;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

class SnapshotFs {
 public:
  virtual ~SnapshotFs() = default;
  // O_CREAT|O_EXCL|O_CLOEXEC|O_WRONLY, mode 0600.
  virtual absl::StatusOr<std::unique_ptr<SnapshotFile>> CreateExclusive(
      const std::string& path) = 0;
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  virtual absl::Status Unlink(const std::string& path) = 0;
  // NotFound when the file does not exist.
  virtual absl::StatusOr<std::unique_ptr<MappedSnapshot>> Map(const std::string& path) = 0;
  // Names (not paths) of the entries of `dir`.
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& dir) = 0;
  // Whether a process with this pid exists (stale temp files, §5.2).
  virtual bool ProcessAlive(int pid) = 0;
};

// open/write/fsync/rename/mmap.
class PosixSnapshotFs final : public SnapshotFs {
 public:
  absl::StatusOr<std::unique_ptr<SnapshotFile>> CreateExclusive(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;
  absl::Status Unlink(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<MappedSnapshot>> Map(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override;
  bool ProcessAlive(int pid) override;
};

// The directory of `path` ("." when it has none).
std::string SnapshotDir(const std::string& path);
// Unlinks every `path.tmp.<pid>` whose process is gone, and the one of `own_pid` (at
// start it can only be an earlier life's, e.g. pid 1 in a container); returns how many.
size_t RemoveStaleSnapshotTemps(SnapshotFs& fs, const std::string& path, int own_pid);

// Streams one snapshot. Begin, AddRecord..., Finish; the first error ends the write
// (temp file unlinked; later calls return that error). Destroying an unfinished writer
// abandons it (temp file unlinked).
class SnapshotWriter {
 public:
  SnapshotWriter(SnapshotFs& fs, std::string path, int pid);
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  absl::Status Begin(const SnapshotHeader& header);
  // REQUIRES: record.view's blocks are parents-first and their engine ranges lie in
  // its engine_hashes (KvIndex::ExportView's output).
  absl::Status AddRecord(const SnapshotRecord& record);
  // Footer (counts filled in by the writer), fsync, rename to the path, fsync the dir.
  absl::Status Finish(uint64_t distinct_hash_count, uint64_t begin_stream_seq = 0);
  // Unlinks the temp file of an unfinished write.
  void Abandon();

  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return bytes_; }
  uint64_t block_count() const { return blocks_; }
  uint32_t target_count() const { return targets_; }

 private:
  absl::Status Append(const void* data, size_t size);
  absl::Status Flush();
  absl::Status Fail(const char* op, const absl::Status& status);

  SnapshotFs& fs_;
  const std::string path_;
  const std::string temp_path_;
  std::unique_ptr<SnapshotFile> file_;
  std::unique_ptr<SnapshotHashState> hash_;
  std::vector<uint8_t> buffer_;
  absl::Status error_;
  bool begun_ = false;
  bool finished_ = false;
  uint64_t bytes_ = 0;
  uint64_t blocks_ = 0;
  uint32_t targets_ = 0;
};

// The router's snapshot settings (doc/snapshot.md §2).
struct KvSnapshotOptions {
  std::string path;         // --kv-snapshot-path; empty: no snapshots
  int64_t interval_s = 30;  // --kv-snapshot-interval-s; 0: only the final one (SIGTERM)
  std::string fleet_id;     // --kv-snapshot-fleet, or derived (§4.2)
  bool fleet_derived = true;
  int64_t max_age_s = 900;  // --kv-snapshot-max-age-s
  bool peer_join = false;   // --kv-snapshot-peer-join (§9.1)

  bool enabled() const { return !path.empty(); }
};

// Start-up load outcomes (metric label `result`, §10).
enum class LoadResult : uint8_t {
  kAbsent,
  kLoaded,
  kRefusedIo,
  kRefusedCorrupt,
  kRefusedVersion,
  kRefusedFleet,
  kRefusedStale,
  kRefusedChecksum,
  kRefusedStream,
};
inline constexpr size_t kLoadResultCount = 9;
std::string_view LoadResultName(LoadResult result);  // "absent", "refused_io", ...

// What a file must match to be loaded.
struct SnapshotExpect {
  uint32_t hash_scheme = 0;
  SnapshotTransport transport = SnapshotTransport::kZmq;
  std::string fleet_id;  // as configured (compared in its stored form)
  int64_t now_unix_ms = 0;
  int64_t max_age_s = 900;
  int64_t max_future_s = 60;
};

class SnapshotReader {
 public:
  // Maps and checks the whole file; result() says whether it can be used.
  static SnapshotReader Open(SnapshotFs& fs, const std::string& path, const SnapshotExpect& expect);
  // Checks bytes already in memory (peer join, tests); `bytes` must outlive the reader.
  static SnapshotReader FromBytes(const uint8_t* bytes, size_t size, const SnapshotExpect& expect);

  LoadResult result() const { return result_; }
  // The reason of a refusal, as logged ("age 1234 s > max 900 s").
  const std::string& detail() const { return detail_; }
  const SnapshotHeader& header() const { return header_; }
  const SnapshotFooter& footer() const { return footer_; }
  size_t record_count() const { return records_.size(); }
  size_t file_size() const { return size_; }
  // Decodes record i (REQUIRES: result() == kLoaded, i < record_count()).
  void ReadRecord(size_t i, SnapshotRecord& out) const;
  // Decodes record i but its blocks: key, block size, position, the view's bound and
  // eviction state (`out.view`'s blocks and engine hashes are left empty).
  void ReadRecordHead(size_t i, SnapshotRecord& out) const;
  // The records' byte offsets in the file, in its order.
  const std::vector<size_t>& record_offsets() const { return records_; }
  // Unmaps the file (records can no longer be read).
  void Release();

 private:
  void Check(const SnapshotExpect& expect);
  bool CheckHeader(const SnapshotExpect& expect);
  bool ParseRecords();
  void Refuse(LoadResult result, std::string detail);

  std::shared_ptr<MappedSnapshot> map_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  LoadResult result_ = LoadResult::kRefusedCorrupt;
  std::string detail_;
  SnapshotHeader header_;
  SnapshotFooter footer_;
  std::vector<size_t> records_;  // offsets of the records' magic
};

// The record layer of the reader, shared with the build that consumes a file as a peer
// fetch receives it (kv_snapshot_stream.h). ParseSnapshotRecord checks the structure of
// the record at byte `pos` of data[0, end): kOk sets `next` to the byte after it;
// kShort: the record does not end before `end` (a whole file: corrupt; a file still
// arriving: wait for more); kCorrupt: it never will parse. `what` says why (the
// refusal's detail).
enum class RecordParse : uint8_t { kOk, kShort, kCorrupt };
RecordParse ParseSnapshotRecord(const uint8_t* data, size_t pos, size_t end, size_t& next,
                                std::string& what);
// The block count of a record ParseSnapshotRecord accepted.
uint32_t SnapshotRecordBlockCount(const uint8_t* data, size_t pos);
// Decode a record ParseSnapshotRecord accepted (the Head: all but its blocks).
void DecodeSnapshotRecordHead(const uint8_t* data, size_t pos, SnapshotRecord& out);
void DecodeSnapshotRecord(const uint8_t* data, size_t pos, SnapshotRecord& out);
// Fields of a header (kSnapshotHeaderBytes at `header`) and a footer (kSnapshotFooterBytes
// at `footer`) not yet checked, as the streamed build uses them before the check: the
// salted-traffic flag, the rows to reserve, and the fewest bytes a block takes in a file.
bool SnapshotHeaderSalted(const uint8_t* header);
uint64_t SnapshotFooterDistinctHashes(const uint8_t* footer);
inline constexpr size_t kSnapshotMinBlockBytes = 18;

}  // namespace infera::events
