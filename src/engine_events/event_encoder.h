// KV-event encoding (engine side): plain event structs -> msgpack payloads in the
// exact shapes vLLM and SGLang publish (doc/kv-events.md). Used by EventPublisher,
// the simulated engine and tests. The router never decodes with this code: its
// decoder's golden tests are written byte by byte from the documented layouts.
//
// Thread-safety: pure functions over plain values.
//
// Example:
//   EventBatch batch{.ts = 1.5, .events = {Stored{.engine_hashes = {7}, .token_ids = tokens,
//                                                 .block_size = 16}}};
//   std::string payload = EncodeEventBatch(batch, WireShape::kVllm);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace infera::events {

struct Stored {
  std::vector<uint64_t> engine_hashes{};
  std::optional<uint64_t> parent{};  // engine hash of the parent block; nullopt: root
  std::vector<uint32_t> token_ids{};
  uint32_t block_size = 16;
  std::optional<std::string> medium{};  // "GPU", "CPU", ...; nullopt: nil (= GPU)
  std::optional<int64_t> lora_id{};
  std::optional<std::string> lora_name{};  // the LoRA adapter's name; nullopt: nil
  // vLLM's extra_keys: one entry per block, nil or the string keys its hash covered
  // (the LoRA name, then the cache_salt on a chain's first block); nullopt: the field
  // is omitted (older vLLM, SGLang: the wire does not show a salt).
  std::optional<std::vector<std::optional<std::vector<std::string>>>> extra_keys{};
};

struct Removed {
  std::vector<uint64_t> engine_hashes{};
  std::optional<std::string> medium{};
};

struct AllCleared {};

using KvEvent = std::variant<Stored, Removed, AllCleared>;

struct EventBatch {
  double ts = 0;
  std::vector<KvEvent> events{};
  std::optional<uint32_t> dp_rank{};
};

enum class WireShape : uint8_t {
  // vLLM today: map batch {"ts","events","data_parallel_rank"?} with tagged-map events
  // {"type":"BlockStored",...}; defaulted trailing fields (extra_keys when unset,
  // group_idx, kv_cache_spec_*) omitted, fields without defaults (lora_id, medium,
  // lora_name) always present.
  kVllm,
  // Older vLLM: array batch [ts, events, dp_rank?] with tagged-array events
  // ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium, lora_name,
  // extra_keys?] (extra_keys only when set).
  kVllmArray,
  // SGLang: array batch [ts, events, attn_dp_rank?] with tagged-array events
  // ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium?],
  // ["BlockRemoved", hashes, medium?]; medium omitted when nullopt.
  kSglang,
};

// Hashes are written as unsigned integers (vLLM and SGLang normalise to int).
std::string EncodeEventBatch(const EventBatch& batch, WireShape shape);

}  // namespace infera::events
