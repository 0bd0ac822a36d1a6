#include "events/kv_snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace infera::events {

struct SnapshotHashState {
  XXH3_state_t state;
};

namespace {

constexpr char kMagic[8] = {'I', 'N', 'F', 'K', 'V', 'S', 'N', 'P'};
constexpr char kEndMagic[8] = {'P', 'N', 'S', 'V', 'K', 'F', 'N', 'I'};
constexpr char kRecordMagic[4] = {'T', 'R', 'E', 'C'};
constexpr size_t kBufferBytes = 1 << 20;
// Record bytes after the worker id and before the blocks (§4.3).
constexpr size_t kRecordFixedBytes = 4 + 4 + 8 + 8 + 1 + 8 + 8 + 8 + 4;
constexpr size_t kBlockFixedBytes = 8 + 4 + 1 + 1 + 4;
static_assert(kBlockFixedBytes == kSnapshotMinBlockBytes);
constexpr uint8_t kRecordComplete = 1;
constexpr uint8_t kRecordHasPosition = 2;
constexpr uint8_t kRecordEvictedSinceClear = 4;
static_assert(std::endian::native == std::endian::little, "the file is little-endian");

void Put(std::string& out, uint64_t v, size_t bytes) {
  out.append(reinterpret_cast<const char*>(&v), bytes);  // little-endian host (below)
}

// A little-endian field of `bytes` (<= 8) bytes: one unaligned load (the restore of
// 10M blocks reads ~260 MB through here).
uint64_t Get(const uint8_t* p, size_t bytes) {
  uint64_t v = 0;
  std::memcpy(&v, p, bytes);
  return v;
}

absl::Status Errno(const char* op, const std::string& path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(op, " ", path));
}

class PosixFile final : public SnapshotFile {
 public:
  explicit PosixFile(int fd) : fd_(fd) {}
  ~PosixFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  absl::StatusOr<size_t> Write(const void* data, size_t size) override {
    for (;;) {
      ssize_t n = ::write(fd_, data, size);
      if (n > 0) return static_cast<size_t>(n);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) return absl::ResourceExhaustedError("short write");
      return absl::ErrnoToStatus(errno, "write");
    }
  }
  absl::Status Sync() override {
    return ::fsync(fd_) == 0 ? absl::OkStatus() : absl::ErrnoToStatus(errno, "fsync");
  }
  absl::Status Close() override {
    int fd = std::exchange(fd_, -1);
    return ::close(fd) == 0 ? absl::OkStatus() : absl::ErrnoToStatus(errno, "close");
  }

 private:
  int fd_;
};

class PosixMap final : public MappedSnapshot {
 public:
  PosixMap(void* data, size_t size) : data_(data), size_(size) {}
  ~PosixMap() override {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  const uint8_t* data() const override { return static_cast<const uint8_t*>(data_); }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
};

}  // namespace

std::string StoredFleetId(std::string_view fleet_id) {
  if (fleet_id.size() <= kSnapshotFleetIdMaxBytes) return std::string(fleet_id);
  return absl::StrFormat("x:%016x", XXH3_64bits(fleet_id.data(), fleet_id.size()));
}

std::string SnapshotDir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::StatusOr<std::unique_ptr<SnapshotFile>> PosixSnapshotFs::CreateExclusive(
    const std::string& path) {
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_CLOEXEC | O_WRONLY, 0600);
  if (fd < 0) return Errno("open", path);
  return std::make_unique<PosixFile>(fd);
}

absl::Status PosixSnapshotFs::Rename(const std::string& from, const std::string& to) {
  return ::rename(from.c_str(), to.c_str()) == 0 ? absl::OkStatus() : Errno("rename", to);
}

absl::Status PosixSnapshotFs::SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open", dir);
  int rc = ::fsync(fd);
  absl::Status status = rc == 0 ? absl::OkStatus() : Errno("fsync", dir);
  ::close(fd);
  return status;
}

absl::Status PosixSnapshotFs::Unlink(const std::string& path) {
  return ::unlink(path.c_str()) == 0 ? absl::OkStatus() : Errno("unlink", path);
}

absl::StatusOr<std::unique_ptr<MappedSnapshot>> PosixSnapshotFs::Map(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    absl::Status status = Errno("fstat", path);
    ::close(fd);
    return status;
  }
  size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      absl::Status status = Errno("mmap", path);
      ::close(fd);
      return status;
    }
    ::madvise(data, size, MADV_SEQUENTIAL | MADV_WILLNEED);
  }
  ::close(fd);
  return std::make_unique<PosixMap>(data, size);
}

absl::StatusOr<std::vector<std::string>> PosixSnapshotFs::List(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Errno("opendir", dir);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  return names;
}

bool PosixSnapshotFs::ProcessAlive(int pid) {
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

size_t RemoveStaleSnapshotTemps(SnapshotFs& fs, const std::string& path, int own_pid) {
  std::string dir = SnapshotDir(path);
  size_t slash = path.rfind('/');
  std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  absl::StatusOr<std::vector<std::string>> names = fs.List(dir);
  if (!names.ok()) return 0;
  size_t removed = 0;
  for (const std::string& name : *names) {
    if (!name.starts_with(prefix)) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(prefix.size()), &pid)) continue;
    if (pid != own_pid && fs.ProcessAlive(pid)) continue;
    if (fs.Unlink(dir + "/" + name).ok()) ++removed;
  }
  return removed;
}

// --- SnapshotWriter ---

SnapshotWriter::SnapshotWriter(SnapshotFs& fs, std::string path, int pid)
    : fs_(fs),
      path_(std::move(path)),
      temp_path_(path_ + ".tmp." + std::to_string(pid)),
      hash_(std::make_unique<SnapshotHashState>()) {}

SnapshotWriter::~SnapshotWriter() { Abandon(); }

void SnapshotWriter::Abandon() {
  if (file_ == nullptr) return;
  file_.reset();
  (void)fs_.Unlink(temp_path_);
  if (error_.ok()) error_ = absl::CancelledError("snapshot abandoned");
}

absl::Status SnapshotWriter::Fail(const char* op, const absl::Status& status) {
  file_.reset();
  (void)fs_.Unlink(temp_path_);
  error_ = absl::Status(status.code(), absl::StrCat(op, ": ", status.message()));
  return error_;
}

absl::Status SnapshotWriter::Begin(const SnapshotHeader& header) {
  if (begun_) return absl::FailedPreconditionError("Begin called twice");
  begun_ = true;
  absl::StatusOr<std::unique_ptr<SnapshotFile>> file = fs_.CreateExclusive(temp_path_);
  if (!file.ok()) {
    error_ = absl::Status(file.status().code(), absl::StrCat("open: ", file.status().message()));
    return error_;
  }
  file_ = *std::move(file);
  XXH3_INITSTATE(&hash_->state);
  XXH3_64bits_reset(&hash_->state);
  buffer_.reserve(kBufferBytes);
  std::string fleet = StoredFleetId(header.fleet_id);
  std::string h(kMagic, sizeof(kMagic));
  Put(h, header.format_version, 4);
  Put(h, header.hash_scheme, 4);
  Put(h, static_cast<uint64_t>(header.created_unix_ms), 8);
  Put(h, header.writer_instance, 8);
  Put(h, static_cast<uint8_t>(header.transport), 1);
  Put(h, header.salted_traffic ? 1 : 0, 1);
  Put(h, fleet.size(), 2);
  Put(h, 0, 4);
  Put(h, header.nats_stream_created_ns, 8);
  h += fleet;
  h.resize(kSnapshotHeaderBytes, '\0');
  return Append(h.data(), h.size());
}

absl::Status SnapshotWriter::AddRecord(const SnapshotRecord& r) {
  if (!error_.ok()) return error_;
  if (file_ == nullptr) return absl::FailedPreconditionError("AddRecord before Begin");
  std::string out(kRecordMagic, sizeof(kRecordMagic));
  Put(out, r.key.worker_id.size(), 2);
  out += r.key.worker_id;
  Put(out, r.key.dp_rank, 4);
  Put(out, r.block_size, 4);
  Put(out, r.view.max_blocks, 8);
  Put(out, r.view.evicted_blocks, 8);
  uint8_t flags = (r.position.complete ? kRecordComplete : 0) |
                  (r.position.has_position ? kRecordHasPosition : 0) |
                  (r.view.evicted_since_clear ? kRecordEvictedSinceClear : 0);
  Put(out, flags, 1);
  Put(out, r.position.last_seq, 8);
  Put(out, r.position.last_payload_xxh3, 8);
  Put(out, r.position.stream_seq, 8);
  Put(out, r.view.blocks.size(), 4);
  out.reserve(out.size() + r.view.blocks.size() * 18 + r.view.engine_hashes.size() * 8);
  for (const core::ViewBlock& b : r.view.blocks) {
    Put(out, b.router_hash, 8);
    Put(out, b.parent, 4);
    Put(out, b.tiers, 1);
    Put(out, b.engine_count, 1);
    Put(out, b.recency, 4);
    out.append(reinterpret_cast<const char*>(r.view.engine_hashes.data() + b.engine_begin),
               8 * size_t{b.engine_count});
  }
  absl::Status status = Append(out.data(), out.size());
  blocks_ += r.view.blocks.size();
  ++targets_;
  return status;
}

absl::Status SnapshotWriter::Finish(uint64_t distinct_hash_count, uint64_t begin_stream_seq) {
  if (!error_.ok()) return error_;
  if (file_ == nullptr) return absl::FailedPreconditionError("Finish before Begin");
  std::string f;
  Put(f, targets_, 4);
  Put(f, 0, 4);
  Put(f, blocks_, 8);
  Put(f, distinct_hash_count, 8);
  Put(f, begin_stream_seq, 8);
  if (absl::Status s = Append(f.data(), f.size()); !s.ok()) return s;
  uint64_t checksum = XXH3_64bits_digest(&hash_->state);
  f.clear();
  Put(f, checksum, 8);
  f.append(kEndMagic, sizeof(kEndMagic));
  buffer_.insert(buffer_.end(), f.begin(), f.end());  // outside the checksum
  bytes_ += f.size();
  if (absl::Status s = Flush(); !s.ok()) return s;
  if (absl::Status s = file_->Sync(); !s.ok()) return Fail("fsync", s);
  if (absl::Status s = file_->Close(); !s.ok()) return Fail("close", s);
  if (absl::Status s = fs_.Rename(temp_path_, path_); !s.ok()) return Fail("rename", s);
  file_.reset();
  finished_ = true;
  if (absl::Status s = fs_.SyncDir(SnapshotDir(path_)); !s.ok()) {
    error_ = absl::Status(s.code(), absl::StrCat("fsync dir: ", s.message()));
    return error_;
  }
  return absl::OkStatus();
}

absl::Status SnapshotWriter::Append(const void* data, size_t size) {
  XXH3_64bits_update(&hash_->state, data, size);
  const auto* p = static_cast<const uint8_t*>(data);
  buffer_.insert(buffer_.end(), p, p + size);
  bytes_ += size;
  return buffer_.size() >= kBufferBytes ? Flush() : absl::OkStatus();
}

absl::Status SnapshotWriter::Flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    absl::StatusOr<size_t> n = file_->Write(buffer_.data() + done, buffer_.size() - done);
    if (!n.ok()) return Fail("write", n.status());
    if (*n == 0) return Fail("write", absl::ResourceExhaustedError("short write"));
    done += *n;
  }
  buffer_.clear();
  return absl::OkStatus();
}

// --- SnapshotReader ---

std::string_view LoadResultName(LoadResult result) {
  switch (result) {
    case LoadResult::kAbsent:
      return "absent";
    case LoadResult::kLoaded:
      return "loaded";
    case LoadResult::kRefusedIo:
      return "refused_io";
    case LoadResult::kRefusedCorrupt:
      return "refused_corrupt";
    case LoadResult::kRefusedVersion:
      return "refused_version";
    case LoadResult::kRefusedFleet:
      return "refused_fleet";
    case LoadResult::kRefusedStale:
      return "refused_stale";
    case LoadResult::kRefusedChecksum:
      return "refused_checksum";
    case LoadResult::kRefusedStream:
      return "refused_stream";
  }
  return "unknown";
}

SnapshotReader SnapshotReader::Open(SnapshotFs& fs, const std::string& path,
                                    const SnapshotExpect& expect) {
  SnapshotReader reader;
  absl::StatusOr<std::unique_ptr<MappedSnapshot>> map = fs.Map(path);
  if (!map.ok()) {
    if (absl::IsNotFound(map.status())) {
      reader.Refuse(LoadResult::kAbsent, absl::StrCat("no snapshot at ", path));
    } else {
      reader.Refuse(LoadResult::kRefusedIo,
                    absl::StrCat("cannot read ", path, ": ", map.status().message()));
    }
    return reader;
  }
  reader.map_ = *std::move(map);
  reader.data_ = reader.map_->data();
  reader.size_ = reader.map_->size();
  reader.Check(expect);
  return reader;
}

SnapshotReader SnapshotReader::FromBytes(const uint8_t* bytes, size_t size,
                                         const SnapshotExpect& expect) {
  SnapshotReader reader;
  reader.data_ = bytes;
  reader.size_ = size;
  reader.Check(expect);
  return reader;
}

void SnapshotReader::Refuse(LoadResult result, std::string detail) {
  result_ = result;
  detail_ = std::move(detail);
  records_.clear();
}

void SnapshotReader::Release() {
  map_.reset();
  data_ = nullptr;
  records_.clear();
}

void SnapshotReader::Check(const SnapshotExpect& expect) {
  if (size_ < kSnapshotHeaderBytes + kSnapshotFooterBytes ||
      std::memcmp(data_, kMagic, sizeof(kMagic)) != 0 ||
      std::memcmp(data_ + size_ - sizeof(kEndMagic), kEndMagic, sizeof(kEndMagic)) != 0) {
    return Refuse(LoadResult::kRefusedCorrupt, absl::StrCat("not a snapshot (size ", size_, ")"));
  }
  if (!CheckHeader(expect)) return;
  const uint8_t* f = data_ + size_ - kSnapshotFooterBytes;
  footer_.target_count = static_cast<uint32_t>(Get(f, 4));
  footer_.block_count = Get(f + 8, 8);
  footer_.distinct_hash_count = Get(f + 16, 8);
  footer_.begin_stream_seq = Get(f + 24, 8);
  footer_.checksum = Get(f + 32, 8);
  uint64_t actual = XXH3_64bits(data_, size_ - kSnapshotFooterBytes + 32);
  if (actual != footer_.checksum) {
    return Refuse(LoadResult::kRefusedChecksum,
                  absl::StrFormat("checksum 0x%016x != 0x%016x", actual, footer_.checksum));
  }
  if (ParseRecords()) result_ = LoadResult::kLoaded;
}

bool SnapshotReader::CheckHeader(const SnapshotExpect& expect) {
  const uint8_t* h = data_;
  header_.format_version = static_cast<uint32_t>(Get(h + 8, 4));
  header_.hash_scheme = static_cast<uint32_t>(Get(h + 12, 4));
  header_.created_unix_ms = static_cast<int64_t>(Get(h + 16, 8));
  header_.writer_instance = Get(h + 24, 8);
  uint8_t transport = h[32];
  header_.salted_traffic = (h[33] & 1) != 0;
  size_t fleet_len = Get(h + 34, 2);
  header_.nats_stream_created_ns = Get(h + 40, 8);
  if (header_.format_version != kSnapshotFormatVersion) {
    Refuse(LoadResult::kRefusedVersion,
           absl::StrCat("version ", header_.format_version, ", this router reads ",
                        kSnapshotFormatVersion));
    return false;
  }
  if (header_.hash_scheme != expect.hash_scheme) {
    Refuse(LoadResult::kRefusedVersion,
           absl::StrCat("hash scheme ", header_.hash_scheme, ", this router hashes with ",
                        expect.hash_scheme));
    return false;
  }
  if (transport > 1 || fleet_len == 0 || fleet_len > kSnapshotFleetIdMaxBytes) {
    Refuse(LoadResult::kRefusedCorrupt, "bad transport or fleet length in header");
    return false;
  }
  header_.transport = static_cast<SnapshotTransport>(transport);
  header_.fleet_id.assign(reinterpret_cast<const char*>(h + 48), fleet_len);
  auto name = [](SnapshotTransport t) { return t == SnapshotTransport::kZmq ? "zmq" : "nats"; };
  if (header_.transport != expect.transport) {
    Refuse(LoadResult::kRefusedFleet, absl::StrCat("written for ", name(header_.transport),
                                                   ", running ", name(expect.transport)));
    return false;
  }
  std::string want = StoredFleetId(expect.fleet_id);
  if (header_.fleet_id != want) {
    Refuse(LoadResult::kRefusedFleet,
           absl::StrCat("fleet '", header_.fleet_id, "' != '", want, "'"));
    return false;
  }
  int64_t age_ms = expect.now_unix_ms - header_.created_unix_ms;
  if (age_ms > expect.max_age_s * 1000) {
    Refuse(LoadResult::kRefusedStale,
           absl::StrCat("age ", age_ms / 1000, " s > max ", expect.max_age_s, " s"));
    return false;
  }
  if (-age_ms > expect.max_future_s * 1000) {
    Refuse(LoadResult::kRefusedStale, absl::StrCat("created ", -age_ms / 1000, " s in the future"));
    return false;
  }
  return true;
}

RecordParse ParseSnapshotRecord(const uint8_t* data, size_t pos, size_t end, size_t& next,
                                std::string& what) {
  if (end - pos < 6) {
    what = "bad record magic";
    return RecordParse::kShort;
  }
  if (std::memcmp(data + pos, kRecordMagic, 4) != 0) {
    what = "bad record magic";
    return RecordParse::kCorrupt;
  }
  size_t id_len = Get(data + pos + 4, 2);
  if (end - pos - 6 < id_len + kRecordFixedBytes) {
    what = "record past the end";
    return RecordParse::kShort;
  }
  const uint8_t* fixed = data + pos + 6 + id_len;
  if (Get(fixed + 4, 4) == 0) {
    what = "block size 0";
    return RecordParse::kCorrupt;
  }
  uint64_t count = Get(fixed + kRecordFixedBytes - 4, 4);
  size_t p = pos + 6 + id_len + kRecordFixedBytes;
  for (uint64_t i = 0; i < count; ++i) {
    if (end - p < kBlockFixedBytes) {
      what = absl::StrCat("block ", i, " past the end");
      return RecordParse::kShort;
    }
    uint32_t parent = static_cast<uint32_t>(Get(data + p + 8, 4));
    if (parent != core::kViewParentRoot && parent != core::kViewParentUnknown && parent >= i) {
      what = absl::StrCat("parent ", parent, " >= ", i);
      return RecordParse::kCorrupt;
    }
    size_t engines = data[p + 13];
    if ((end - p - kBlockFixedBytes) / 8 < engines) {
      what = "engine hashes past the end";
      return RecordParse::kShort;
    }
    p += kBlockFixedBytes + 8 * engines;
  }
  next = p;
  return RecordParse::kOk;
}

uint32_t SnapshotRecordBlockCount(const uint8_t* data, size_t pos) {
  const uint8_t* fixed = data + pos + 6 + Get(data + pos + 4, 2);
  return static_cast<uint32_t>(Get(fixed + kRecordFixedBytes - 4, 4));
}

bool SnapshotHeaderSalted(const uint8_t* header) { return (header[33] & 1) != 0; }

uint64_t SnapshotFooterDistinctHashes(const uint8_t* footer) { return Get(footer + 16, 8); }

bool SnapshotReader::ParseRecords() {
  const size_t end = size_ - kSnapshotFooterBytes;
  size_t pos = kSnapshotHeaderBytes;
  uint64_t blocks = 0;
  auto corrupt = [&](std::string what) {
    Refuse(LoadResult::kRefusedCorrupt, absl::StrCat("record ", records_.size(), ": ", what));
    return false;
  };
  std::string what;
  while (pos < end) {
    if (records_.size() >= footer_.target_count) return corrupt("more records than the footer's");
    size_t next = 0;
    if (ParseSnapshotRecord(data_, pos, end, next, what) != RecordParse::kOk) return corrupt(what);
    blocks += SnapshotRecordBlockCount(data_, pos);
    records_.push_back(pos);
    pos = next;
  }
  if (records_.size() != footer_.target_count) {
    return corrupt(absl::StrCat("footer says ", footer_.target_count, " targets"));
  }
  if (blocks != footer_.block_count) {
    return corrupt(absl::StrCat(blocks, " blocks, footer says ", footer_.block_count));
  }
  return true;
}

void SnapshotReader::ReadRecordHead(size_t i, SnapshotRecord& out) const {
  DecodeSnapshotRecordHead(data_, records_[i], out);
}

void SnapshotReader::ReadRecord(size_t i, SnapshotRecord& out) const {
  DecodeSnapshotRecord(data_, records_[i], out);
}

void DecodeSnapshotRecordHead(const uint8_t* data, size_t pos, SnapshotRecord& out) {
  size_t id_len = Get(data + pos + 4, 2);
  out.key.worker_id.assign(reinterpret_cast<const char*>(data + pos + 6), id_len);
  const uint8_t* f = data + pos + 6 + id_len;
  out.key.dp_rank = static_cast<uint32_t>(Get(f, 4));
  out.block_size = static_cast<uint32_t>(Get(f + 4, 4));
  out.view.blocks.clear();
  out.view.engine_hashes.clear();
  out.view.epoch_stored = 0;
  out.view.max_blocks = Get(f + 8, 8);
  out.view.evicted_blocks = Get(f + 16, 8);
  uint8_t flags = f[24];
  out.view.evicted_since_clear = (flags & kRecordEvictedSinceClear) != 0;
  out.position.complete = (flags & kRecordComplete) != 0;
  out.position.has_position = (flags & kRecordHasPosition) != 0;
  out.position.last_seq = Get(f + 25, 8);
  out.position.last_payload_xxh3 = Get(f + 33, 8);
  out.position.stream_seq = Get(f + 41, 8);
}

void DecodeSnapshotRecord(const uint8_t* data, size_t pos, SnapshotRecord& out) {
  DecodeSnapshotRecordHead(data, pos, out);
  const uint8_t* f = data + pos + 6 + Get(data + pos + 4, 2);
  size_t count = Get(f + 49, 4);
  const uint8_t* p = f + kRecordFixedBytes;
  out.view.blocks.reserve(count);
  out.view.engine_hashes.reserve(count);
  for (size_t b = 0; b < count; ++b) {
    core::ViewBlock v{};
    v.router_hash = Get(p, 8);
    v.parent = static_cast<uint32_t>(Get(p + 8, 4));
    v.tiers = p[12];
    v.engine_count = p[13];
    v.recency = static_cast<uint32_t>(Get(p + 14, 4));
    v.engine_begin = static_cast<uint32_t>(out.view.engine_hashes.size());
    p += kBlockFixedBytes;
    for (uint32_t e = 0; e < v.engine_count; ++e, p += 8)
      out.view.engine_hashes.push_back(Get(p, 8));
    out.view.blocks.push_back(v);
  }
}

}  // namespace infera::events
