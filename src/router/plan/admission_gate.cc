#include "router/plan/admission_gate.h"

#include <algorithm>

namespace infera::router {

core::Admission AdmissionGate::Offer(const std::string& key, uint64_t id, std::string_view tenant,
                                     int priority, int64_t now_ns, bool must_wait) {
  std::lock_guard lock(mu_);
  auto it = queues_.try_emplace(key, config_).first;
  return it->second.Offer(id, tenant, priority, now_ns, must_wait);
}

std::vector<uint64_t> AdmissionGate::Drain(const std::string& key, int64_t now_ns,
                                           absl::FunctionRef<bool()> still_saturated) {
  std::vector<uint64_t> released;
  std::lock_guard lock(mu_);
  auto it = queues_.find(key);
  if (it == queues_.end()) return released;
  while (!it->second.empty() && !still_saturated()) {
    if (auto id = it->second.PopNext(now_ns)) released.push_back(*id);
  }
  return released;
}

bool AdmissionGate::Cancel(const std::string& key, uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = queues_.find(key);
  return it != queues_.end() && it->second.Cancel(id);
}

std::vector<std::pair<std::string, uint64_t>> AdmissionGate::Expire(int64_t now_ns) {
  std::vector<std::pair<std::string, uint64_t>> dropped;
  std::lock_guard lock(mu_);
  for (auto& [key, queue] : queues_) {
    for (uint64_t id : queue.Expire(now_ns)) dropped.emplace_back(key, id);
  }
  return dropped;
}

int64_t AdmissionGate::RetryAfterSeconds(const std::string& key, int64_t now_ns) const {
  std::lock_guard lock(mu_);
  auto it = queues_.find(key);
  return it == queues_.end() ? 1 : it->second.RetryAfterSeconds(now_ns);
}

size_t AdmissionGate::Depth(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : it->second.size();
}

std::vector<std::pair<std::string, size_t>> AdmissionGate::Depths() const {
  std::vector<std::pair<std::string, size_t>> depths;
  std::lock_guard lock(mu_);
  for (const auto& [key, queue] : queues_) depths.emplace_back(key, queue.size());
  std::sort(depths.begin(), depths.end());
  return depths;
}

std::vector<std::string> AdmissionGate::KeysWaiting() const {
  std::vector<std::string> keys;
  std::lock_guard lock(mu_);
  for (const auto& [key, queue] : queues_) {
    if (!queue.empty()) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace infera::router
