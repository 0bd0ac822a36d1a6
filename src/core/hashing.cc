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

uint64_t KeyDigest(std::string_view key) { return XXH3_64bits(key.data(), key.size()) | 1; }

uint64_t BlockKey(uint64_t adapter, uint64_t salt) {
  if (adapter == 0 && salt == 0) return 0;
  if (adapter == kUnattributableKey || salt == kUnattributableKey) return kUnattributableKey;
  unsigned char buf[16];
  std::memcpy(buf, &adapter, 8);
  std::memcpy(buf + 8, &salt, 8);
  return XXH3_64bits(buf, sizeof(buf)) | 1;
}

BlockHash HashChunk(BlockHash parent, std::span<const TokenId> tokens, uint64_t key) {
  if (tokens.size() <= kStackTokens) {
    unsigned char buf[8 + 4 * kStackTokens];
    std::memcpy(buf, &parent, 8);
    std::memcpy(buf + 8, tokens.data(), tokens.size() * 4);
    return XXH3_64bits_withSeed(buf, 8 + tokens.size() * 4, key);
  }
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset_withSeed(&state, key);
  XXH3_64bits_update(&state, &parent, 8);
  XXH3_64bits_update(&state, tokens.data(), tokens.size() * 4);
  return XXH3_64bits_digest(&state);
}

void AppendChain(std::span<const TokenId> tokens, size_t block_size, BlockHash parent,
                 std::vector<BlockHash>& out) {
  AppendChain(tokens, block_size, parent, HashKeys{}, out);
}

void AppendChain(std::span<const TokenId> tokens, size_t block_size, BlockHash parent,
                 const HashKeys& keys, std::vector<BlockHash>& out) {
  const size_t blocks = tokens.size() / block_size;
  out.reserve(out.size() + blocks);
  const uint64_t later_key = BlockKey(keys.adapter, 0);
  for (size_t i = 0; i < blocks; ++i) {
    const uint64_t key = i == 0 && parent == 0 ? BlockKey(keys.adapter, keys.salt) : later_key;
    parent = HashChunk(parent, tokens.subspan(i * block_size, block_size), key);
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
