// KV-event payload decoding: untrusted msgpack bytes -> a typed, validated batch.
//
// Accepts every shape engines send today (doc/kv-events.md has the grammar):
//   batch   [ts, [event...], dp_rank?]  or  {"ts", "events", "data_parallel_rank" |
//           "attn_dp_rank"}
//   event   ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//            lora_id, medium?, lora_name?, extra_keys?, group_idx?, kv_cache_spec_kind?,
//            kv_cache_spec_sliding_window?]
//           ["BlockRemoved", block_hashes, medium?, group_idx?]   ["AllBlocksCleared"]
//           or the same as tagged maps {"type": "BlockStored", "block_hashes": ...}
//   hashes  signed/unsigned ints (normalised to u64) or bytes (last 8, big-endian)
//
// DecodeEventBatch never throws and never reads out of bounds. On any malformed input
// it returns an error and the batch must be discarded whole: the ingestor applies a
// batch only after it decoded completely, so no event of a bad batch is applied.
//
// Thread-safety: DecodeEventBatch is a pure function; a DecodedBatch is a plain value.
//
// Example:
//   DecodedBatch batch;  // reuse across calls: its vectors keep their capacity
//   absl::Status s = DecodeEventBatch(payload, batch);
//   for (const DecodedEvent& e : batch.events) { ... batch.HashesOf(e) ... }
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/types.h"

namespace infera::events {

enum class EventType : uint8_t { kStored, kRemoved, kCleared };

// Limits beyond which a payload is rejected (a real batch is far smaller).
inline constexpr size_t kMaxPayloadBytes = 64u << 20;

// What a BlockStored's `extra_keys` said (vLLM: one entry per block hash, nil or the
// tuple of the keys its block hash covered: the LoRA name, multimodal identifiers,
// the cache_salt on a chain's first block, prompt-embedding digests). A summary of
// O(1) size per event; the applier resolves it against lora_name
// (AttributeStoredKeys, doc/kv-events.md §3 "Extra keys").
struct ExtraKeysSummary {
  static constexpr uint32_t kNone = UINT32_MAX;
  bool present = false;    // an array was sent (absent and nil: the wire is salt-blind)
  bool malformed = false;  // not an array, or an entry that is neither nil nor an array
  uint32_t entries = 0;
  // Entry 0: its string items (saturating at 255), whether it has another item, and
  // the KeyDigest of its first and last string.
  uint8_t first_strings = 0;
  bool first_other = false;
  uint64_t first_key = 0;
  uint64_t last_key = 0;
  // Entries 1..: the first with a non-string item or two strings or more; the first
  // with no item; the first with exactly one string, that string's KeyDigest, and
  // the first whose one string differs from it. kNone: no such entry.
  uint32_t irregular = kNone;
  uint32_t empty = kNone;
  uint32_t single = kNone;
  uint64_t single_key = 0;
  uint32_t single_mismatch = kNone;
};

struct DecodedEvent {
  EventType type = EventType::kCleared;
  // Storage tier from `medium` (absent/nil -> device).
  core::Tier tier = core::Tier::kDevice;
  // False when the event is of no use for prefix matching and must be skipped
  // (kv_cache_spec_kind not a full-attention kind, an unknown medium); see also
  // group_idx, which the applier resolves per target.
  bool usable = true;
  bool has_parent = false;
  bool has_group_idx = false;
  bool has_spec_kind = false;
  uint64_t parent_hash = 0;
  int64_t group_idx = 0;
  uint32_t block_size = 0;  // 0: absent (BlockRemoved, AllBlocksCleared)
  std::optional<int64_t> lora_id;
  // lora_name: absent/nil (no adapter), a string (its KeyDigest), or another type.
  bool has_lora_name = false;
  bool lora_name_malformed = false;
  uint64_t lora_name_key = 0;
  ExtraKeysSummary extra_keys{};
  // Ranges into DecodedBatch::hashes / DecodedBatch::tokens.
  uint32_t hash_begin = 0;
  uint32_t hash_count = 0;
  uint32_t token_begin = 0;
  uint32_t token_count = 0;
};

struct DecodedBatch {
  double ts = 0;
  std::optional<int64_t> dp_rank;
  std::vector<DecodedEvent> events;
  std::vector<core::BlockHash> hashes;  // engine hashes of all events, in order
  std::vector<core::TokenId> tokens;    // token ids of all BlockStored events, in order

  std::span<const core::BlockHash> HashesOf(const DecodedEvent& e) const {
    return std::span<const core::BlockHash>(hashes).subspan(e.hash_begin, e.hash_count);
  }
  std::span<const core::TokenId> TokensOf(const DecodedEvent& e) const {
    return std::span<const core::TokenId>(tokens).subspan(e.token_begin, e.token_count);
  }
  void Clear() {
    ts = 0;
    dp_rank.reset();
    events.clear();
    hashes.clear();
    tokens.clear();
  }
  // Frees the arrays when a big batch left them large: a stream keeps its scratch
  // between batches, and one 64 MiB payload would otherwise pin ~300 MB of tokens.
  void ReleaseIfLarge() {
    constexpr size_t kKeepBytes = size_t{4} << 20;
    if (tokens.capacity() * sizeof(core::TokenId) + hashes.capacity() * sizeof(core::BlockHash) +
            events.capacity() * sizeof(DecodedEvent) >
        kKeepBytes) {
      *this = DecodedBatch();
    }
  }
};

// Decodes one payload into `out` (cleared first). On error `out` is left in an
// unspecified but valid state and must not be applied.
absl::Status DecodeEventBatch(std::span<const uint8_t> payload, DecodedBatch& out);

// `medium` -> tier: GPU -> device; CPU, CPU_PINNED, CPU_TIER1 -> host; CPU_TIER2,
// DISK, NVME -> disk (case-insensitive). nullopt for an unknown medium.
std::optional<core::Tier> TierFromMedium(std::string_view medium);

// Whether a kv_cache_spec_kind is prefix KV the router can match on.
bool IsPrefixKvKind(std::string_view kind);

// The router's u64 view of an engine hash given as bytes: the last 8 bytes,
// big-endian (all of them when fewer than 8).
core::BlockHash HashFromBytes(std::span<const uint8_t> bytes);

}  // namespace infera::events
