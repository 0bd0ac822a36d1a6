// Router-side block hashing: chained XXH3-64 over token ids (doc/hashing.md).
//
//   hash_chunk(parent, tokens, key) = XXH3_64bits_withSeed(bytes, key)
//     bytes = parent as 8-byte little-endian || each token as 4-byte little-endian u32
//   h_0 = hash_chunk(0, tokens[0:bs], k_0); h_i = hash_chunk(h_{i-1}, tokens[i*bs:(i+1)*bs], k_i)
//   A trailing partial block is not hashed.
//
// Extra keys (doc/hashing.md "Extra keys"): a request with a cache_salt or for a LoRA
// adapter hashes each block with a key, as vLLM puts them in its block hashes: the
// salt in the chain's first block only, the adapter in every block. A request with
// neither uses key 0 everywhere, which is exactly the plain XXH3-64 of the bytes.
//   k_0 = BlockKey(adapter, salt), k_i = BlockKey(adapter, 0) for i >= 1
//
// Example:
//   std::vector<BlockHash> chain = HashChain(tokens, /*block_size=*/16);
//   HashKeys keys{.salt = KeyDigest(cache_salt), .adapter = KeyDigest(lora_name)};
//   AppendChain(tokens, 16, /*parent=*/0, keys, chain);
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace infera::core {

// The version of the router hash scheme (doc/hashing.md): bump it with any change of
// how router block hashes are computed (chunking, byte layout, seeds, extra keys), so
// that a KV snapshot of another scheme is refused (doc/snapshot.md §4.1).
inline constexpr uint32_t kHashSchemeVersion = 1;

// The block key of a block whose extra keys the router cannot attribute (a salt
// the events do not show, an adapter known by id only, multimodal identifiers): no
// request ever hashes with it (KeyDigest and BlockKey are odd for real keys), so
// such blocks, and every block chained from them, are never matched.
inline constexpr uint64_t kUnattributableKey = 2;

// The digest of one extra key (a cache_salt, a LoRA adapter name): XXH3-64 (seed 0)
// of its UTF-8 bytes with the lowest bit set, so never 0 ("none") or
// kUnattributableKey.
uint64_t KeyDigest(std::string_view key);

// The extra keys of one request's blocks, as digests (0: none).
struct HashKeys {
  uint64_t salt = 0;     // KeyDigest(cache_salt): enters the chain's first block only
  uint64_t adapter = 0;  // KeyDigest(LoRA adapter name): enters every block

  bool empty() const { return salt == 0 && adapter == 0; }
  friend bool operator==(const HashKeys&, const HashKeys&) = default;
};

// The seed of one block: 0 when both are 0 (a plain block); kUnattributableKey when
// either is; else XXH3-64 (seed 0) of adapter (8 bytes LE) || salt (8 bytes LE),
// lowest bit set.
uint64_t BlockKey(uint64_t adapter, uint64_t salt);

// Hash of one block given its parent's hash (0 for the first block) and its key.
BlockHash HashChunk(BlockHash parent, std::span<const TokenId> tokens, uint64_t key = 0);

// The chain of full blocks of `tokens`, starting from `parent`, without extra keys.
// REQUIRES: block_size > 0.
std::vector<BlockHash> HashChain(std::span<const TokenId> tokens, size_t block_size,
                                 BlockHash parent = 0);

// Appends the chain to `out` (no allocation when `out` has capacity).
void AppendChain(std::span<const TokenId> tokens, size_t block_size, BlockHash parent,
                 std::vector<BlockHash>& out);
// The same with extra keys: the salt enters the first block only when `parent` is 0
// (the chain starts at the root); the adapter enters every block.
void AppendChain(std::span<const TokenId> tokens, size_t block_size, BlockHash parent,
                 const HashKeys& keys, std::vector<BlockHash>& out);

}  // namespace infera::core
