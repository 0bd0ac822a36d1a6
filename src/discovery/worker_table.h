// WorkerTable: the workers currently registered under an etcd prefix, and the
// added / updated / removed callbacks that changes to it produce.
//
// EtcdDiscovery feeds it the range snapshot (ReplaceAll, which reports only the
// difference to what was known, so a re-snapshot after a compaction or reconnect
// does not flap workers) and each watched put and delete. Keys map to records; a
// value that does not parse as a WorkerRecord counts as "no worker under this key"
// (reported as an error to the caller for logging), and a record whose worker_id is
// already held by another key is rejected the same way, so worker ids stay unique.
//
// Pure: no I/O. Thread-safety: not thread-safe; one owner thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "discovery/discovery.h"
#include "discovery/etcd_json.h"
#include "discovery/worker_record.h"

namespace infera::discovery {

class WorkerTable {
 public:
  // Callbacks may be empty functions.
  explicit WorkerTable(DiscoveryCallbacks callbacks) : callbacks_(std::move(callbacks)) {}

  // A put under key. Returns the parse or conflict error when the value was not
  // accepted (a worker previously under the key is removed in that case).
  absl::Status ApplyPut(const std::string& key, const std::string& value);
  void ApplyDelete(const std::string& key);
  // Makes the table equal to the snapshot; returns the rejected values' errors.
  std::vector<absl::Status> ReplaceAll(const std::vector<EtcdKv>& kvs);

  size_t size() const { return by_key_.size(); }
  // worker_id -> record of every present worker.
  std::map<std::string, WorkerRecord> Workers() const;

 private:
  // Installs record under key (nullptr: nothing under key), emitting callbacks.
  void Set(const std::string& key, const WorkerRecord* record);

  DiscoveryCallbacks callbacks_;
  std::map<std::string, WorkerRecord> by_key_;
  std::map<std::string, std::string> key_of_worker_;  // worker_id -> key
};

}  // namespace infera::discovery
