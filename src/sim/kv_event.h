// KvEvent: the KV-cache events the simulated engine emits, as plain structs.
//
// They carry exactly what vLLM's KVEventBatch carries (architecture §4):
// BlockStored (engine block hashes, parent hash or none, the token ids of the
// stored blocks, block size, medium, the LoRA adapter's id and name, and per block
// the extra keys its hash covered), BlockRemoved (engine hashes, medium) and
// AllBlocksCleared. Hashes are the engine's own (see KvCache), never the router's.
// The wire encoding (msgpack, ZMQ) lives in src/engine_events/publisher.h; the offline
// simulator applies these structs to the router's index directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"

namespace infera::sim {

struct KvEvent {
  enum class Kind : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Kind kind = Kind::kBlockStored;
  std::vector<core::BlockHash> block_hashes;   // stored or removed, in chain order
  std::optional<core::BlockHash> parent_hash;  // BlockStored: none for a chain's first block
  std::vector<core::TokenId> token_ids;        // BlockStored: block_size × block_hashes.size()
  uint32_t block_size = 16;                    // BlockStored
  core::Tier medium = core::Tier::kDevice;     // always GPU for this engine
  std::optional<int64_t> lora_id{};            // BlockStored of a LoRA request
  std::optional<std::string> lora_name{};
  // BlockStored: per stored block, the extra keys of its hash as vLLM lists them
  // (the LoRA name, then the cache_salt on a chain's first block); nullopt: none.
  std::vector<std::optional<std::vector<std::string>>> extra_keys{};
};

}  // namespace infera::sim
