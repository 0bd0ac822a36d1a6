// CandidateCache: the static half of PickPlanner's candidate filter, per fleet
// snapshot and model (doc/perf-scale.md "Pick cost at 4,104 targets").
//
// What a plan's candidates depend on splits in two. Static, fixed while the Fleet
// snapshot is: whether the request's model is a LoRA adapter of the fleet, which
// workers serve it (model_name or lora_adapters), the disagg_mode filter of a mixed
// plan, and the candidate, owner and PD lists those workers make. Dynamic, read at
// every pick: retired, the health checks' verdict, the breaker, already tried, render
// parity. The cache keeps the static half of each (model, mixed plan or not) until the
// fleet changes, so a pick walks only the workers that serve its model and copies
// their targets in runs.
//
// The fleet is recognised by its workers, not its address: the cache holds a copy of
// the snapshot (its shared_ptrs keep the workers alive, so an equal list of pointers
// is the same immutable records), compared pointer by pointer at every Get.
//
// Thread-safety: none; PickPlanner keeps it under the pick mutex.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/pd_planner.h"
#include "core/types.h"
#include "router/plan/fleet.h"

namespace infera::router {

class CandidateCache {
 public:
  struct Entry {
    uint64_t adapter_key = 0;                 // ctx.hash_keys.adapter: the model is a LoRA adapter
    bool model_known = false;                 // some worker passes the static filter
    std::vector<const FleetWorker*> workers;  // those workers, in fleet order
    // workers[i]'s targets are candidates[first[i] .. first[i + 1]); first has
    // workers.size() + 1 entries.
    std::vector<size_t> first;
    std::vector<core::TargetId> candidates;
    std::vector<const FleetWorker*> owners;        // one per candidate
    std::vector<core::PdCandidate> pd_candidates;  // one per candidate; empty for mixed
  };

  // The static candidates of `model` in `fleet` (mixed_only: mixed workers alone).
  // The reference stays valid until the next Get.
  const Entry& Get(const Fleet& fleet, const std::string& model, bool mixed_only);

  // Entries kept per fleet before they are dropped (models come from clients).
  static constexpr size_t kMaxEntries = 64;

 private:
  bool SameFleet(const Fleet& fleet) const;
  static Entry Build(const Fleet& fleet, const std::string& model, bool mixed_only);

  Fleet fleet_;                                         // the snapshot the entries describe
  absl::flat_hash_map<std::string, Entry> entries_[2];  // [mixed_only]
};

}  // namespace infera::router
