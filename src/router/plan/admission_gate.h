// AdmissionGate: the router's admission queues, one core::AdmissionQueue per candidate
// pool (doc/admission.md, "Router wiring", items 3-5).
//
// The key names the pool (the model and "mixed" or the PD prefill pool). The caller
// computes the hold condition (Selector::MinLoad over the pool's candidates >= the
// threshold) and passes it in; Drain asks it again before each release, so a burst is
// bound one request at a time by the load of now (serial binding).
//
// Thread-safety: every method takes the gate's own mutex. Lock order: the gate's mutex
// before the pick mutex, never the other way (`still_saturated` in Drain may take the
// pick mutex; nothing may call the gate while holding the pick mutex).
//
// Example:
//   AdmissionGate gate({.max_queued = 1024, .max_wait_ns = 30'000'000'000});
//   switch (gate.Offer(key, id, tenant, priority, now, min_load >= threshold)) { ... }
//   for (uint64_t id : gate.Drain(key, now, [&] { return MinLoad(key) >= threshold; }))
//     wake(id);
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "core/admission_queue.h"

namespace infera::router {

class AdmissionGate {
 public:
  explicit AdmissionGate(const core::QueueConfig& config) : config_(config) {}

  core::Admission Offer(const std::string& key, uint64_t id, std::string_view tenant, int priority,
                        int64_t now_ns, bool must_wait);
  // Releases waiting requests of `key`, in the queue's order, while `still_saturated`
  // answers false; returns their ids in release order.
  std::vector<uint64_t> Drain(const std::string& key, int64_t now_ns,
                              absl::FunctionRef<bool()> still_saturated);
  // Removes a waiting request (client gone); false if it no longer waits.
  bool Cancel(const std::string& key, uint64_t id);
  // Drops the requests that waited max_wait_ns in every pool: (key, id) pairs.
  std::vector<std::pair<std::string, uint64_t>> Expire(int64_t now_ns);

  int64_t RetryAfterSeconds(const std::string& key, int64_t now_ns) const;
  size_t Depth(const std::string& key) const;
  // Every pool's depth, for the gauge infera_router_queue_depth{pool}.
  std::vector<std::pair<std::string, size_t>> Depths() const;
  // The pools that have requests waiting.
  std::vector<std::string> KeysWaiting() const;

 private:
  const core::QueueConfig config_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, core::AdmissionQueue> queues_;  // guarded by mu_
};

}  // namespace infera::router
