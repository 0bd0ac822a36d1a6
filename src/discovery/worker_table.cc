#include "discovery/worker_table.h"

#include <set>

#include "discovery/internal/str_cat.h"

namespace infera::discovery {

using internal::Cat;
using internal::MessageOf;

void WorkerTable::Set(const std::string& key, const WorkerRecord* record) {
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    if (record != nullptr && it->second.worker_id == record->worker_id) {
      if (it->second == *record) return;
      it->second = *record;
      if (callbacks_.on_updated) callbacks_.on_updated(*record);
      return;
    }
    std::string old_id = it->second.worker_id;
    key_of_worker_.erase(old_id);
    by_key_.erase(it);
    if (callbacks_.on_removed) callbacks_.on_removed(old_id);
  }
  if (record == nullptr) return;
  by_key_.emplace(key, *record);
  key_of_worker_[record->worker_id] = key;
  if (callbacks_.on_added) callbacks_.on_added(*record);
}

absl::Status WorkerTable::ApplyPut(const std::string& key, const std::string& value) {
  auto record = ParseWorkerRecord(value);
  if (!record.ok()) {
    Set(key, nullptr);
    return absl::InvalidArgumentError(Cat("key '", key, "': ", MessageOf(record.status())));
  }
  auto owner = key_of_worker_.find(record->worker_id);
  if (owner != key_of_worker_.end() && owner->second != key) {
    Set(key, nullptr);
    return absl::AlreadyExistsError(Cat("key '", key, "': worker_id '", record->worker_id,
                                        "' is already registered under '", owner->second, "'"));
  }
  Set(key, &*record);
  return absl::OkStatus();
}

void WorkerTable::ApplyDelete(const std::string& key) { Set(key, nullptr); }

std::vector<absl::Status> WorkerTable::ReplaceAll(const std::vector<EtcdKv>& kvs) {
  std::vector<absl::Status> errors;
  std::set<std::string> present;
  for (const EtcdKv& kv : kvs) present.insert(kv.key);
  // Removals first, so a worker that moved to another key is not a conflict.
  std::vector<std::string> gone;
  for (const auto& [key, record] : by_key_) {
    if (!present.contains(key)) gone.push_back(key);
  }
  for (const std::string& key : gone) Set(key, nullptr);
  for (const EtcdKv& kv : kvs) {
    if (auto s = ApplyPut(kv.key, kv.value); !s.ok()) errors.push_back(std::move(s));
  }
  return errors;
}

std::map<std::string, WorkerRecord> WorkerTable::Workers() const {
  std::map<std::string, WorkerRecord> out;
  for (const auto& [key, record] : by_key_) out.emplace(record.worker_id, record);
  return out;
}

}  // namespace infera::discovery
