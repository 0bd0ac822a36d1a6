// Golden KV-event payloads written byte by byte from the documented layouts
// (doc/kv-events.md), shared by the decoder and applier tests and the fuzz seed
// corpus. Notation for HexBytes(): hex byte pairs; 'text' is the ASCII bytes of text
// (its msgpack str header is always written by hand before it).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace infera::events::golden {

// Test-only helper: a malformed literal is a bug in the test, so it throws.
inline std::vector<uint8_t> HexBytes(std::string_view s) {
  std::vector<uint8_t> out;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::invalid_argument("bad hex digit");
  };
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == ' ' || c == '\n') {
      ++i;
    } else if (c == '\'') {
      const size_t end = s.find('\'', i + 1);
      if (end == std::string_view::npos) throw std::invalid_argument("unterminated text");
      for (size_t j = i + 1; j < end; ++j) out.push_back(static_cast<uint8_t>(s[j]));
      i = end + 1;
    } else {
      if (i + 1 >= s.size()) throw std::invalid_argument("odd hex");
      out.push_back(static_cast<uint8_t>(nibble(c) * 16 + nibble(s[i + 1])));
      i += 2;
    }
  }
  return out;
}

// SGLang: array batch [ts, events], tagged-array events without medium.
//   [1.5, [["BlockStored", [1, 2], nil, [1..8], 4, nil],
//          ["BlockRemoved", [2]],
//          ["AllBlocksCleared"]]]
inline constexpr std::string_view kSglangArray =
    "92 cb 3ff8000000000000 93"
    " 96 ab 'BlockStored' 92 01 02 c0 98 01 02 03 04 05 06 07 08 04 c0"
    " 92 ac 'BlockRemoved' 91 02"
    " 91 b0 'AllBlocksCleared'";

// SGLang with attn_dp_rank as the third batch field and medium on both events:
//   [2.0, [["BlockStored", [10], nil, [1,2,3,4], 4, nil, "CPU"],
//          ["BlockRemoved", [10], "CPU"]], 3]
inline constexpr std::string_view kSglangDpRankMedium =
    "93 cb 4000000000000000 92"
    " 97 ab 'BlockStored' 91 0a c0 94 01 02 03 04 04 c0 a3 'CPU'"
    " 93 ac 'BlockRemoved' 91 0a a3 'CPU'"
    " 03";

// vLLM today: map batch, tagged-map events, defaulted fields omitted, signed hashes.
//   {"ts": 2.0, "events": [
//      {"type": "BlockStored", "block_hashes": [-1, -9223372036854775808],
//       "parent_block_hash": nil, "token_ids": [1..8], "block_size": 4,
//       "lora_id": nil, "medium": "GPU", "lora_name": nil}],
//    "data_parallel_rank": 1}
inline constexpr std::string_view kVllmMap =
    "83 a2 'ts' cb 4000000000000000 a6 'events' 91"
    " 88 a4 'type' ab 'BlockStored'"
    "    ac 'block_hashes' 92 ff d3 8000000000000000"
    "    b1 'parent_block_hash' c0"
    "    a9 'token_ids' 98 01 02 03 04 05 06 07 08"
    "    aa 'block_size' 04"
    "    a7 'lora_id' c0"
    "    a6 'medium' a3 'GPU'"
    "    a9 'lora_name' c0"
    " b2 'data_parallel_rank' 01";

// vLLM (mid-2026 and later) also sends an array batch holding map events, with a
// parent in another batch: [3.0, [{"type": "BlockStored", "block_hashes": [5],
// "parent_block_hash": 18446744073709551615, "token_ids": [9,10,11,12], "block_size": 4,
// "lora_id": nil, "medium": nil, "lora_name": nil}, {"type": "BlockRemoved",
// "block_hashes": [5], "medium": nil}], nil]
inline constexpr std::string_view kVllmArrayOfMaps =
    "93 cb 4008000000000000 92"
    " 88 a4 'type' ab 'BlockStored' ac 'block_hashes' 91 05"
    "    b1 'parent_block_hash' cf ffffffffffffffff"
    "    a9 'token_ids' 94 09 0a 0b 0c aa 'block_size' 04"
    "    a7 'lora_id' c0 a6 'medium' c0 a9 'lora_name' c0"
    " 83 a4 'type' ac 'BlockRemoved' ac 'block_hashes' 91 05 a6 'medium' c0"
    " c0";

// vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: 32-byte bin hashes (the router
// takes the last 8 bytes, big-endian) in an older-vLLM array event with all 12 fields.
//   [0, [["BlockStored", [bin32 ...0102030405060708], bin32 ...1112131415161718,
//         [1,2,3,4], 4, 7, "CPU_TIER2", "adapter", [["mm", 1]], 0, "full_attention",
//         nil]]]
inline constexpr std::string_view kVllmBytesHashes =
    "92 00 91"
    " 9c ab 'BlockStored'"
    "    91 c4 20 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 0102030405060708"
    "    c4 20 bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb 1112131415161718"
    "    94 01 02 03 04 04 07 a9 'CPU_TIER2' a7 'adapter'"
    "    91 92 a2 'mm' 01"
    "    00 ae 'full_attention' c0";

// vLLM today, a LoRA request with a cache_salt: extra_keys lists per block what its
// hash covered (kv_cache_utils.generate_block_hash_extra_keys: the LoRA name first,
// the salt on the chain's first block only), then a child event chained to block 12:
//   {"ts": 0, "events": [
//     {"type": "BlockStored", "block_hashes": [11, 12], "parent_block_hash": nil,
//      "token_ids": [1..8], "block_size": 4, "lora_id": 1, "medium": "GPU",
//      "lora_name": "sql-lora", "extra_keys": [["sql-lora", "tenant-a"], ["sql-lora"]]},
//     {"type": "BlockStored", "block_hashes": [13], "parent_block_hash": 12,
//      "token_ids": [9, 10, 11, 12], "block_size": 4, "lora_id": 1, "medium": "GPU",
//      "lora_name": "sql-lora", "extra_keys": [["sql-lora"]]}]}
inline constexpr std::string_view kVllmSaltedLora =
    "82 a2 'ts' 00 a6 'events' 92"
    " 89 a4 'type' ab 'BlockStored' ac 'block_hashes' 92 0b 0c b1 'parent_block_hash' c0"
    "    a9 'token_ids' 98 01 02 03 04 05 06 07 08 aa 'block_size' 04 a7 'lora_id' 01"
    "    a6 'medium' a3 'GPU' a9 'lora_name' a8 'sql-lora'"
    "    aa 'extra_keys' 92 92 a8 'sql-lora' a8 'tenant-a' 91 a8 'sql-lora'"
    " 89 a4 'type' ab 'BlockStored' ac 'block_hashes' 91 0d b1 'parent_block_hash' 0c"
    "    a9 'token_ids' 94 09 0a 0b 0c aa 'block_size' 04 a7 'lora_id' 01"
    "    a6 'medium' a3 'GPU' a9 'lora_name' a8 'sql-lora'"
    "    aa 'extra_keys' 91 91 a8 'sql-lora'";

// vLLM today, a multimodal request: an image starts in the second block, whose extra
// keys hold the (identifier, offset) tuple:
//   {"ts": 0, "events": [{"type": "BlockStored", "block_hashes": [21, 22],
//     "parent_block_hash": nil, "token_ids": [1..8], "block_size": 4, "lora_id": nil,
//     "medium": "GPU", "lora_name": nil, "extra_keys": [nil, [["img0", 1]]]}]}
inline constexpr std::string_view kVllmMultimodal =
    "82 a2 'ts' 00 a6 'events' 91"
    " 89 a4 'type' ab 'BlockStored' ac 'block_hashes' 92 15 16 b1 'parent_block_hash' c0"
    "    a9 'token_ids' 98 01 02 03 04 05 06 07 08 aa 'block_size' 04 a7 'lora_id' c0"
    "    a6 'medium' a3 'GPU' a9 'lora_name' c0"
    "    aa 'extra_keys' 92 c0 91 92 a4 'img0' 01";

// Group filtering and bigram token ids:
//   [0, [["BlockStored", [1], nil, [[1,2],[2,3],[3,4],[4,5]], 4, nil, nil, nil, nil, nil,
//         "sliding_window", 128],                      -> not prefix KV: skipped
//        ["BlockStored", [2], nil, [[1,2],[2,3],[3,4],[4,5]], 4, nil, nil, nil, nil, 1],
//                                                      -> group 1 without a kind: skipped
//        ["BlockStored", [3], nil, [[1,2],[2,3],[3,4],[4,5]], 4, nil],
//        ["BlockRemoved", [3], nil, 1]]]               -> group 1: skipped
inline constexpr std::string_view kGroupsAndBigrams =
    "92 00 94"
    " 9c ab 'BlockStored' 91 01 c0 94 92 01 02 92 02 03 92 03 04 92 04 05 04"
    "    c0 c0 c0 c0 c0 ae 'sliding_window' cc 80"
    " 9a ab 'BlockStored' 91 02 c0 94 92 01 02 92 02 03 92 03 04 92 04 05 04"
    "    c0 c0 c0 c0 01"
    " 96 ab 'BlockStored' 91 03 c0 94 92 01 02 92 02 03 92 03 04 92 04 05 04 c0"
    " 94 ac 'BlockRemoved' 91 03 c0 01";

struct Golden {
  std::string_view name;
  std::string_view hex;
};
inline constexpr Golden kAll[] = {
    {"sglang_array", kSglangArray},
    {"sglang_dp_rank_medium", kSglangDpRankMedium},
    {"vllm_map", kVllmMap},
    {"vllm_array_of_maps", kVllmArrayOfMaps},
    {"vllm_bytes_hashes", kVllmBytesHashes},
    {"vllm_salted_lora", kVllmSaltedLora},
    {"vllm_multimodal", kVllmMultimodal},
    {"groups_and_bigrams", kGroupsAndBigrams},
};

}  // namespace infera::events::golden
