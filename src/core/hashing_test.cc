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

// Extra keys (doc/hashing.md "Extra keys"). The values were computed independently
// from the definition with Python's xxhash (3.2): xxh3_64_intdigest(bytes, seed=key).
TEST(HashingTest, KeyDigestGoldenValues) {
  EXPECT_EQ(KeyDigest("tenant-a"), 0x635c5bebe6e5f781ULL);
  EXPECT_EQ(KeyDigest("sql-lora"), 0x8b43147fe6fe0aa1ULL);
  EXPECT_EQ(KeyDigest("") & 1, 1u);  // odd: never 0 (none) nor kUnattributableKey
}

TEST(HashingTest, BlockKeyGoldenValues) {
  const uint64_t s = KeyDigest("tenant-a");
  const uint64_t a = KeyDigest("sql-lora");
  EXPECT_EQ(BlockKey(0, 0), 0u);
  EXPECT_EQ(BlockKey(0, s), 0x0a286f7637d544b7ULL);
  EXPECT_EQ(BlockKey(a, 0), 0x7111b6d5b15fa23fULL);
  EXPECT_EQ(BlockKey(a, s), 0xf7c45907d0d8a7d1ULL);
  EXPECT_EQ(BlockKey(kUnattributableKey, 0), kUnattributableKey);
  EXPECT_EQ(BlockKey(a, kUnattributableKey), kUnattributableKey);
  EXPECT_EQ(HashChunk(0, std::vector<TokenId>{1, 2, 3, 4}, kUnattributableKey),
            0xf8d648f433c54e81ULL);
}

TEST(HashingTest, ChainsWithExtraKeysGoldenValues) {
  const std::vector<TokenId> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const HashKeys salt{.salt = KeyDigest("tenant-a")};
  const HashKeys lora{.adapter = KeyDigest("sql-lora")};
  const HashKeys both{.salt = KeyDigest("tenant-a"), .adapter = KeyDigest("sql-lora")};
  auto chain = [&](const HashKeys& keys) {
    std::vector<BlockHash> out;
    AppendChain(tokens, 4, 0, keys, out);
    return out;
  };
  // No extra keys: exactly today's chain (architecture §3).
  EXPECT_EQ(chain(HashKeys{}),
            (std::vector<BlockHash>{0x341839abbe30be0bULL, 0x37b6de0623bdb5caULL}));
  // The salt enters block 0 only; block 1 differs through its parent.
  EXPECT_EQ(chain(salt), (std::vector<BlockHash>{0xa0344e62ca4d66feULL, 0x6c07fc00f219d82aULL}));
  EXPECT_EQ(chain(salt)[1], HashChunk(chain(salt)[0], std::vector<TokenId>{5, 6, 7, 8}));
  // The adapter enters every block.
  EXPECT_EQ(chain(lora), (std::vector<BlockHash>{0x3933bcb7de1d5a48ULL, 0xf1510c5463b6bea9ULL}));
  EXPECT_EQ(chain(lora)[1], HashChunk(chain(lora)[0], std::vector<TokenId>{5, 6, 7, 8},
                                      BlockKey(KeyDigest("sql-lora"), 0)));
  EXPECT_EQ(chain(both), (std::vector<BlockHash>{0x1d91b385f01aba76ULL, 0x89542f10ab4aada4ULL}));
}

TEST(HashingTest, SaltEntersOnlyAChainThatStartsAtTheRoot) {
  std::vector<TokenId> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 100);
  const HashKeys keys{.salt = KeyDigest("t"), .adapter = KeyDigest("a")};
  std::vector<BlockHash> full;
  AppendChain(tokens, 16, 0, keys, full);
  // Continuing from block 1 (an event with a parent) gives the same tail: the salt is
  // already in the parent.
  std::vector<BlockHash> tail;
  AppendChain(std::span<const TokenId>(tokens).subspan(32), 16, full[1], keys, tail);
  EXPECT_EQ(tail, std::vector<BlockHash>(full.begin() + 2, full.end()));
  // Different salts, adapters, or none: disjoint chains.
  std::vector<BlockHash> other, plain;
  AppendChain(tokens, 16, 0, HashKeys{.salt = KeyDigest("u"), .adapter = KeyDigest("a")}, other);
  AppendChain(tokens, 16, 0, HashKeys{}, plain);
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_NE(full[i], other[i]);
    EXPECT_NE(full[i], plain[i]);
  }
}

TEST(HashingTest, LargeKeyedBlocksUseStreamingPathWithSameResult) {
  std::vector<TokenId> tokens(1024);
  std::iota(tokens.begin(), tokens.end(), 7);
  std::vector<unsigned char> bytes(8 + 4 * tokens.size(), 0);
  std::memcpy(bytes.data() + 8, tokens.data(), 4 * tokens.size());
  const uint64_t key = BlockKey(KeyDigest("a"), KeyDigest("s"));
  EXPECT_EQ(HashChunk(0, tokens, key), XXH3_64bits_withSeed(bytes.data(), bytes.size(), key));
}

}  // namespace
}  // namespace infera::core
