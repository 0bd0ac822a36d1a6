// Basic vocabulary of the routing core.
//
// The core is pure: no sockets, threads or clock reads. Everything here is plain
// data passed in by the edges (HTTP front, event ingestion, discovery).
#pragma once

#include <cstdint>
#include <string>

namespace infera::core {

// A token id as the engine sees it.
using TokenId = uint32_t;

// A chained XXH3-64 block hash (router side, see doc/hashing.md), or an engine's
// own block hash normalised to u64 (see doc/kv-events.md).
using BlockHash = uint64_t;

// Dense id the index assigns to a routing target (one worker, one DP rank).
// Ids are reused after a target is removed.
using TargetId = uint32_t;

// Identity of a routing target as discovery and events name it.
struct TargetKey {
  std::string worker_id;  // "host:port" as registered
  uint32_t dp_rank = 0;

  friend bool operator==(const TargetKey&, const TargetKey&) = default;
  // "worker_id" for rank 0, "worker_id#dp<rank>" otherwise (used in logs and metrics).
  std::string ToString() const {
    return dp_rank == 0 ? worker_id : worker_id + "#dp" + std::to_string(dp_rank);
  }
};

// The shown name of a target of a worker with `dp_size` ranks: "worker_id#dp<rank>"
// for every rank when dp_size > 1 (rank 0 too), else key.ToString().
inline std::string TargetName(const TargetKey& key, uint32_t dp_size) {
  if (dp_size <= 1) return key.ToString();
  return key.worker_id + "#dp" + std::to_string(key.dp_rank);
}

// Storage tier of a cached block. vLLM/SGLang `medium`: GPU -> kDevice;
// CPU, CPU_PINNED, CPU_TIER1 -> kHost; CPU_TIER2, DISK, NVME -> kDisk.
enum class Tier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2 };
inline constexpr int kTierCount = 3;

// Which pool a pick is for.
enum class Role : uint8_t { kMixed = 0, kPrefill = 1, kDecode = 2 };
inline const char* RoleName(Role r) {
  switch (r) {
    case Role::kMixed:
      return "mixed";
    case Role::kPrefill:
      return "prefill";
    case Role::kDecode:
      return "decode";
  }
  return "mixed";
}

}  // namespace infera::core
