#include "core/hashing.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <numeric>

namespace infera::core {
namespace {

TEST(HashingTest, GoldenValues) {
  const std::vector<TokenId> a = {1, 2, 3, 4};
  const std::vector<TokenId> b = {5, 6, 7, 8};
  const BlockHash h0 = HashChunk(0, a);
  EXPECT_EQ(h0, 0x341839abbe30be0bULL);
  EXPECT_EQ(HashChunk(h0, b), 0x37b6de0623bdb5caULL);
}

TEST(HashingTest, ChainDropsTrailingPartialBlock) {
  const std::vector<TokenId> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const auto chain = HashChain(tokens, 4);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain[0], 0x341839abbe30be0bULL);
  EXPECT_EQ(chain[1], 0x37b6de0623bdb5caULL);
  EXPECT_TRUE(HashChain(std::vector<TokenId>{1, 2, 3}, 4).empty());
}

TEST(HashingTest, ChainFromParentContinuesChain) {
  std::vector<TokenId> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 100);
  const auto full = HashChain(tokens, 16);
  const auto tail = HashChain(std::span<const TokenId>(tokens).subspan(32), 16, full[1]);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0], full[2]);
  EXPECT_EQ(tail[1], full[3]);
}

TEST(HashingTest, LargeBlocksUseStreamingPathWithSameResult) {
  std::vector<TokenId> tokens(1024);
  std::iota(tokens.begin(), tokens.end(), 7);
  // Same bytes hashed in one shot must equal the streaming path used for big blocks.
  std::vector<unsigned char> bytes(8 + 4 * tokens.size(), 0);
  std::memcpy(bytes.data() + 8, tokens.data(), 4 * tokens.size());
  EXPECT_EQ(HashChunk(0, tokens), XXH3_64bits_withSeed(bytes.data(), bytes.size(), 0));
}

}  // namespace
}  // namespace infera::core
