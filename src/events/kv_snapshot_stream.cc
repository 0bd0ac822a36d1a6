#include "events/kv_snapshot_stream.h"

#include <sys/mman.h>

#include <algorithm>

#include "log/steady_clock.h"

namespace infera::events {
namespace {

using log::SteadyUs;
using log::ThreadCpuUs;

}  // namespace

bool RestoreSnapshotRecord(core::KvIndex& staging, const SnapshotRecord& record,
                           core::TargetId& id) {
  id = staging.AddTarget(record.key, record.block_size);
  staging.ReserveTarget(id, record.view.engine_hashes.size());
  return staging.RestoreView(id, record.view) == core::RestoreStatus::kOk;
}

SnapshotStreamBuild::SnapshotStreamBuild(int fd, size_t size) : size_(size) {
  if (size_ >= kSnapshotHeaderBytes + kSnapshotFooterBytes) {
    void* map = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) data_ = static_cast<const uint8_t*>(map);
  }
  thread_ = std::thread([this] { Run(); });
}

SnapshotStreamBuild::~SnapshotStreamBuild() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

void SnapshotStreamBuild::Received(size_t prefix, bool footer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    prefix_ = std::min(prefix, size_);
    footer_ = footer;
    last_byte_us_ = SteadyUs();
  }
  cv_.notify_all();
}

SnapshotStreamBuild::Result SnapshotStreamBuild::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    all_in_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  result_.after_last_byte_us = last_byte_us_ > 0 ? SteadyUs() - last_byte_us_ : 0;
  return std::move(result_);
}

bool SnapshotStreamBuild::WaitFor(size_t have, bool footer) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t start = SteadyUs();
  cv_.wait(lock, [&] { return stop_ || all_in_ || prefix_ > have || (footer && footer_); });
  result_.waited_us += SteadyUs() - start;
  if (stop_) return false;
  if (prefix_ > have || (footer && footer_)) return true;
  return false;  // Finish: no more bytes will come
}

void SnapshotStreamBuild::Run() {
  const int64_t start_us = SteadyUs();
  const int64_t start_cpu = ThreadCpuUs();
  Result& r = result_;
  auto end = [&](std::string error) {
    r.error = std::move(error);
    r.wall_us = SteadyUs() - start_us;
    r.cpu_us = ThreadCpuUs() - start_cpu;
  };
  if (data_ == nullptr) return end("the temp file could not be mapped");
  // The header (chunk 0) and the footer (requested first) before anything is built.
  size_t prefix = 0;
  bool footer = false;
  while (prefix < kSnapshotHeaderBytes || !footer) {
    if (!WaitFor(prefix, !footer)) return end("stopped before the header and footer");
    std::lock_guard<std::mutex> lock(mu_);
    prefix = prefix_;
    footer = footer_;
  }
  const size_t records_end = size_ - kSnapshotFooterBytes;
  r.staging.Reserve(std::min<uint64_t>(
      SnapshotFooterDistinctHashes(data_ + records_end),
      records_end / kSnapshotMinBlockBytes));  // an unchecked footer allocates no more
  if (SnapshotHeaderSalted(data_)) r.staging.NoteSaltedTraffic();
  SnapshotRecord record;
  std::string what;
  size_t pos = kSnapshotHeaderBytes;
  while (pos < records_end) {
    const size_t limit = std::min(prefix, records_end);
    size_t next = 0;
    const RecordParse parse = ParseSnapshotRecord(data_, pos, limit, next, what);
    if (parse == RecordParse::kCorrupt || (parse == RecordParse::kShort && limit == records_end)) {
      return end("record " + std::to_string(r.offsets.size()) + ": " + what);
    }
    if (parse == RecordParse::kShort) {
      if (!WaitFor(prefix, false))
        return end("stopped at record " + std::to_string(r.offsets.size()));
      std::lock_guard<std::mutex> lock(mu_);
      prefix = prefix_;
      continue;
    }
    DecodeSnapshotRecord(data_, pos, record);
    core::TargetId id = 0;
    if (RestoreSnapshotRecord(r.staging, record, id)) {
      r.blocks += record.view.blocks.size();
    } else {
      r.failed.push_back(id);
    }
    r.offsets.push_back(pos);
    pos = next;
  }
  r.complete = true;
  end("");
}

}  // namespace infera::events
