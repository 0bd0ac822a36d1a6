// Router-side block hashing: chained XXH3-64 over token ids (doc/hashing.md).
//
//   hash_chunk(parent, tokens) = XXH3_64bits_withSeed(bytes, 0)
//     bytes = parent as 8-byte little-endian || each token as 4-byte little-endian u32
//   h_0 = hash_chunk(0, tokens[0:bs]); h_i = hash_chunk(h_{i-1}, tokens[i*bs:(i+1)*bs])
//   A trailing partial block is not hashed.
//
// Example:
//   std::vector<BlockHash> chain = HashChain(tokens, /*block_size=*/16);
#pragma once

#include <span>
#include <vector>

#include "core/types.h"

namespace infera::core {

// Hash of one block given its parent's hash (0 for the first block).
BlockHash HashChunk(BlockHash parent, std::span<const TokenId> tokens);

// The chain of full blocks of `tokens`, starting from `parent`.
// REQUIRES: block_size > 0.
std::vector<BlockHash> HashChain(std::span<const TokenId> tokens, size_t block_size,
                                 BlockHash parent = 0);

// Appends the chain to `out` (no allocation when `out` has capacity).
void AppendChain(std::span<const TokenId> tokens, size_t block_size, BlockHash parent,
                 std::vector<BlockHash>& out);

}  // namespace infera::core
