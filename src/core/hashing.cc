#include "core/hashing.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <bit>
#include <cstring>

namespace infera::core {
namespace {

static_assert(std::endian::native == std::endian::little,
              "hashing writes little-endian bytes by copying; port for big-endian hosts");

// Largest block we hash from a stack buffer; larger blocks use the streaming API.
constexpr size_t kStackTokens = 256;

}  // namespace

BlockHash HashChunk(BlockHash parent, std::span<const TokenId> tokens) {
  if (tokens.size() <= kStackTokens) {
    unsigned char buf[8 + 4 * kStackTokens];
    std::memcpy(buf, &parent, 8);
    std::memcpy(buf + 8, tokens.data(), tokens.size() * 4);
    return XXH3_64bits_withSeed(buf, 8 + tokens.size() * 4, 0);
  }
  XXH3_state_t state;
  XXH3_64bits_reset_withSeed(&state, 0);
  XXH3_64bits_update(&state, &parent, 8);
  XXH3_64bits_update(&state, tokens.data(), tokens.size() * 4);
  return XXH3_64bits_digest(&state);
}

void AppendChain(std::span<const TokenId> tokens, size_t block_size, BlockHash parent,
                 std::vector<BlockHash>& out) {
  const size_t blocks = tokens.size() / block_size;
  out.reserve(out.size() + blocks);
  for (size_t i = 0; i < blocks; ++i) {
    parent = HashChunk(parent, tokens.subspan(i * block_size, block_size));
    out.push_back(parent);
  }
}

std::vector<BlockHash> HashChain(std::span<const TokenId> tokens, size_t block_size,
                                 BlockHash parent) {
  std::vector<BlockHash> out;
  AppendChain(tokens, block_size, parent, out);
  return out;
}

}  // namespace infera::core
