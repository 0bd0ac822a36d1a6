// SnapshotStreamBuild: the staging build of a snapshot file as a peer fetch receives
// it (doc/snapshot.md §9.1, "Streamed build"), so that the build overlaps the transfer
// instead of following it.
//
// The fetch writes the file's chunks into the temp file (the footer's chunk first, then
// the rest in order) and reports, after each write, the length of the prefix written
// without a hole and whether the footer is in. A thread of this class maps the temp
// file and, once the header and the footer are in, reserves the staging index (the
// footer's distinct_hash_count, capped by what the file's size can hold) and restores
// record after record as the prefix grows: the same AddTarget, ReserveTarget and
// RestoreView calls in the same order as KvSnapshotLoad::Build, so record i gets id i.
//
// Nothing here is trusted: the bytes are those of a file not yet checked. The build is
// only used after the fetch has checked the whole file (every check of §7) and the
// offsets of the records it restored are the checked reader's (KvSnapshotLoad::Build);
// otherwise it is dropped and nothing of it was ever visible. A record that does not
// parse stops the build (the file's check will refuse the file).
//
// Thread-safety: Received from one thread (the fetch); Finish once, from any thread;
// the destructor stops the build and waits for its thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/kv_index.h"
#include "events/kv_snapshot.h"

namespace infera::events {

// One record into a staging index: AddTarget (its id into `id`), ReserveTarget,
// RestoreView; false when RestoreView refused the view (the target stays, empty).
bool RestoreSnapshotRecord(core::KvIndex& staging, const SnapshotRecord& record,
                           core::TargetId& id);

class SnapshotStreamBuild {
 public:
  // What the build restored.
  struct Result {
    core::KvIndex staging;
    std::vector<size_t> offsets;         // of the records restored, in order
    std::vector<core::TargetId> failed;  // records whose RestoreView refused the view
    uint64_t blocks = 0;                 // restored (the failed records' not counted)
    bool complete = false;               // every record up to the footer
    std::string error;                   // why not complete
    int64_t wall_us = 0, cpu_us = 0;     // the thread's, start to end
    int64_t waited_us = 0;               // of wall_us, waiting for bytes
    int64_t after_last_byte_us = 0;      // from the last Received to the end
  };

  // Maps `size` bytes of `fd` (the temp file, already that long: ftruncate) and starts
  // the thread. A failed mapping makes a build that ends at once, incomplete.
  SnapshotStreamBuild(int fd, size_t size);
  ~SnapshotStreamBuild();
  SnapshotStreamBuild(const SnapshotStreamBuild&) = delete;
  SnapshotStreamBuild& operator=(const SnapshotStreamBuild&) = delete;

  // Bytes [0, prefix) are written, and the footer's too when `footer`.
  void Received(size_t prefix, bool footer);
  // Waits for the build to end (every record, when every byte was received; else it
  // stops where the bytes stop) and returns it.
  Result Finish();

 private:
  void Run();
  // Waits until more than `have` bytes are in or the build is stopped; false: stopped.
  bool WaitFor(size_t have, bool footer);

  const size_t size_;
  const uint8_t* data_ = nullptr;
  Result result_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t prefix_ = 0;         // guarded by mu_
  bool footer_ = false;       // guarded by mu_
  bool stop_ = false;         // guarded by mu_
  bool all_in_ = false;       // guarded by mu_: Finish was called
  int64_t last_byte_us_ = 0;  // guarded by mu_
  std::thread thread_;
};

}  // namespace infera::events
