#include "events/event_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/hashing.h"
#include "event_wire/golden_payloads.h"

namespace infera::events {
namespace {

using golden::HexBytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

DecodedBatch MustDecode(std::string_view hex) {
  DecodedBatch b;
  const std::vector<uint8_t> bytes = HexBytes(hex);
  absl::Status s = DecodeEventBatch(bytes, b);
  EXPECT_TRUE(s.ok()) << s;
  return b;
}

absl::Status DecodeHex(std::string_view hex) {
  DecodedBatch b;
  return DecodeEventBatch(HexBytes(hex), b);
}

std::vector<uint64_t> Hashes(const DecodedBatch& b, size_t i) {
  auto s = b.HashesOf(b.events[i]);
  return {s.begin(), s.end()};
}
std::vector<uint32_t> Tokens(const DecodedBatch& b, size_t i) {
  auto s = b.TokensOf(b.events[i]);
  return {s.begin(), s.end()};
}

TEST(EventDecoder, SglangArrayBatch) {
  DecodedBatch b = MustDecode(golden::kSglangArray);
  EXPECT_EQ(b.ts, 1.5);
  EXPECT_FALSE(b.dp_rank.has_value());
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0].type, EventType::kStored);
  EXPECT_THAT(Hashes(b, 0), ElementsAre(1, 2));
  EXPECT_FALSE(b.events[0].has_parent);
  EXPECT_THAT(Tokens(b, 0), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_EQ(b.events[0].block_size, 4u);
  EXPECT_EQ(b.events[0].tier, core::Tier::kDevice);
  EXPECT_TRUE(b.events[0].usable);
  EXPECT_FALSE(b.events[0].lora_id.has_value());
  EXPECT_EQ(b.events[1].type, EventType::kRemoved);
  EXPECT_THAT(Hashes(b, 1), ElementsAre(2));
  EXPECT_EQ(b.events[2].type, EventType::kCleared);
  EXPECT_EQ(b.events[2].hash_count, 0u);
}

TEST(EventDecoder, SglangDpRankAndMedium) {
  DecodedBatch b = MustDecode(golden::kSglangDpRankMedium);
  EXPECT_EQ(b.ts, 2.0);
  EXPECT_EQ(b.dp_rank, 3);
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.events[0].tier, core::Tier::kHost);
  EXPECT_EQ(b.events[1].tier, core::Tier::kHost);
  EXPECT_THAT(Hashes(b, 1), ElementsAre(10));
}

TEST(EventDecoder, VllmMapBatchWithSignedHashes) {
  DecodedBatch b = MustDecode(golden::kVllmMap);
  EXPECT_EQ(b.dp_rank, 1);
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_THAT(Hashes(b, 0), ElementsAre(0xffffffffffffffffull, 0x8000000000000000ull));
  EXPECT_THAT(Tokens(b, 0), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_EQ(b.events[0].tier, core::Tier::kDevice);
}

TEST(EventDecoder, VllmArrayBatchOfMapEvents) {
  DecodedBatch b = MustDecode(golden::kVllmArrayOfMaps);
  EXPECT_EQ(b.ts, 3.0);
  EXPECT_FALSE(b.dp_rank.has_value());
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_TRUE(b.events[0].has_parent);
  EXPECT_EQ(b.events[0].parent_hash, 0xffffffffffffffffull);
  EXPECT_THAT(Tokens(b, 0), ElementsAre(9, 10, 11, 12));
  EXPECT_EQ(b.events[1].type, EventType::kRemoved);
  EXPECT_THAT(Hashes(b, 1), ElementsAre(5));
}

TEST(EventDecoder, BytesHashesTakeLastEightBytesBigEndian) {
  DecodedBatch b = MustDecode(golden::kVllmBytesHashes);
  ASSERT_EQ(b.events.size(), 1u);
  const DecodedEvent& e = b.events[0];
  EXPECT_THAT(Hashes(b, 0), ElementsAre(0x0102030405060708ull));
  EXPECT_TRUE(e.has_parent);
  EXPECT_EQ(e.parent_hash, 0x1112131415161718ull);
  EXPECT_EQ(e.tier, core::Tier::kDisk);
  EXPECT_EQ(e.lora_id, 7);
  EXPECT_TRUE(e.has_group_idx);
  EXPECT_EQ(e.group_idx, 0);
  EXPECT_TRUE(e.has_spec_kind);
  EXPECT_TRUE(e.usable);
}

TEST(EventDecoder, LoraNameAndExtraKeysAreSummarised) {
  DecodedBatch b = MustDecode(golden::kVllmSaltedLora);
  ASSERT_EQ(b.events.size(), 2u);
  const DecodedEvent& root = b.events[0];
  EXPECT_TRUE(root.has_lora_name);
  EXPECT_EQ(root.lora_name_key, core::KeyDigest("sql-lora"));
  const ExtraKeysSummary& x = root.extra_keys;
  EXPECT_TRUE(x.present);
  EXPECT_FALSE(x.malformed);
  EXPECT_EQ(x.entries, 2u);
  EXPECT_EQ(x.first_strings, 2u);
  EXPECT_FALSE(x.first_other);
  EXPECT_EQ(x.first_key, core::KeyDigest("sql-lora"));
  EXPECT_EQ(x.last_key, core::KeyDigest("tenant-a"));
  EXPECT_EQ(x.single, 1u);
  EXPECT_EQ(x.single_key, core::KeyDigest("sql-lora"));
  EXPECT_EQ(x.irregular, ExtraKeysSummary::kNone);
  EXPECT_EQ(x.single_mismatch, ExtraKeysSummary::kNone);
  DecodedBatch mm = MustDecode(golden::kVllmMultimodal);
  EXPECT_FALSE(mm.events[0].has_lora_name);
  EXPECT_EQ(mm.events[0].extra_keys.first_strings, 0u);
  EXPECT_EQ(mm.events[0].extra_keys.irregular, 1u);  // the (identifier, offset) tuple
}

TEST(EventDecoder, OddLoraNameAndExtraKeysAreNotBatchErrors) {
  // lora_name 5 and extra_keys "x": the events decode; the applier cannot attribute them.
  DecodedBatch b =
      MustDecode("92 00 91 99 ab 'BlockStored' 91 01 c0 94 01 02 03 04 04 c0 c0 05 a1 'x'");
  EXPECT_TRUE(b.events[0].lora_name_malformed);
  EXPECT_TRUE(b.events[0].extra_keys.present);
  EXPECT_TRUE(b.events[0].extra_keys.malformed);
  // An entry that is neither nil nor an array.
  DecodedBatch c =
      MustDecode("92 00 91 99 ab 'BlockStored' 91 01 c0 94 01 02 03 04 04 c0 c0 c0 91 07");
  EXPECT_TRUE(c.events[0].extra_keys.malformed);
}

TEST(EventDecoder, GroupsKindsAndBigrams) {
  DecodedBatch b = MustDecode(golden::kGroupsAndBigrams);
  ASSERT_EQ(b.events.size(), 4u);
  EXPECT_FALSE(b.events[0].usable);  // sliding_window kind
  EXPECT_TRUE(b.events[1].usable);   // group 1: the applier decides per target
  EXPECT_TRUE(b.events[1].has_group_idx);
  EXPECT_EQ(b.events[1].group_idx, 1);
  for (size_t i = 0; i < 3; ++i) EXPECT_THAT(Tokens(b, i), ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(b.events[3].group_idx, 1);
}

TEST(EventDecoder, EveryTruncationOfEveryGoldenFails) {
  for (const golden::Golden& g : golden::kAll) {
    const std::vector<uint8_t> bytes = HexBytes(g.hex);
    DecodedBatch b;
    ASSERT_TRUE(DecodeEventBatch(bytes, b).ok()) << g.name;
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(DecodeEventBatch(std::span(bytes.data(), n), b).ok())
          << g.name << " truncated to " << n;
    }
  }
}

TEST(EventDecoder, MalformedInputsAreErrors) {
  struct Case {
    const char* hex;
    const char* message;
  };
  const Case cases[] = {
      {"", "neither"},
      {"c1", "neither"},
      {"c0", "neither"},
      {"91 cb 3ff8000000000000", "fewer than 2"},
      {"92 00 91 91 ab 'BlockStoreX'", "unknown event tag"},
      {"92 00 91 90", "empty event array"},
      {"92 00 91 91 05", "tag is not a string"},
      {"92 00 91 05", "neither an array nor a map"},
      {"92 00 05", "events is not an array"},
      {"92 a1 'x' 90", "ts is not a number"},
      {"92 00 90 00", "trailing bytes"},
      // A forged huge array header with nothing behind it.
      {"92 00 dd ffffffff", "events is not an array"},
      {"92 00 91 92 ab 'BlockStored' dd ffffffff", "block_hashes is not an array"},
      // Wrong field types.
      {"92 00 91 95 ab 'BlockStored' 91 c3 c0 90 04", "block hash is neither"},
      {"92 00 91 95 ab 'BlockStored' 91 01 c0 91 ff 04", "token id"},
      {"92 00 91 95 ab 'BlockStored' 91 01 c0 91 cf 0000000100000000 04", "above 2^32"},
      {"92 00 91 95 ab 'BlockStored' 91 01 c0 91 01 a1 'x'", "block_size"},
      {"92 00 91 95 ab 'BlockStored' 91 01 c0 91 01 00", "block_size is 0"},
      {"92 00 91 93 ab 'BlockStored' 91 01 c0", "without block_hashes or token_ids"},
      {"92 00 91 91 ac 'BlockRemoved'", "without block_hashes"},
      {"92 00 91 92 ab 'BlockStored' 91 c4 00", "empty block hash"},
      {"92 00 91 96 ab 'BlockStored' 91 01 c0 91 01 04 a1 'x'", "lora_id"},
      {"92 00 91 97 ab 'BlockStored' 91 01 c0 91 01 04 c0 05", "string or nil"},
      {"92 00 91 95 ab 'BlockStored' 91 01 c0 91 90 04", "empty token pair"},
      // Map shapes.
      {"81 a2 'ts' 00", "no events"},
      {"82 a6 'events' 90 a6 'events' 90", "duplicate events"},
      {"82 01 00 a6 'events' 90", "key is not a string"},
      {"92 00 91 81 a4 'type' a1 'X'", "unknown event type"},
      {"92 00 91 81 ac 'block_hashes' 90", "no type"},
      {"92 00 91 82 a4 'type' ab 'BlockStored' a4 'type' ab 'BlockStored'", "duplicate event type"},
      {"92 00 91 83 a4 'type' ac 'BlockRemoved' ac 'block_hashes' 90 ac 'block_hashes' 90",
       "duplicate event field"},
      {"92 00 91 83 a4 'type' ac 'BlockRemoved' ac 'block_hashes' 90 a9 'token_ids' 90",
       "BlockStored fields"},
      {"92 00 91 82 a4 'type' b0 'AllBlocksCleared' ac 'block_hashes' 90", "block fields"},
  };
  for (const Case& c : cases) {
    absl::Status s = DecodeHex(c.hex);
    EXPECT_FALSE(s.ok()) << c.hex;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.hex;
  }
}

TEST(EventDecoder, DeepNestingInSkippedFieldsIsRejected) {
  // extra_keys (skipped) nested 1000 arrays deep.
  std::string hex = "92 00 91 99 ab 'BlockStored' 91 01 c0 91 01 04 c0 c0 c0";
  for (int i = 0; i < 1000; ++i) hex += " 91";
  hex += " c0";
  EXPECT_FALSE(DecodeHex(hex).ok());
  // 20 levels are fine.
  std::string ok = "92 00 91 99 ab 'BlockStored' 91 01 c0 91 01 04 c0 c0 c0";
  for (int i = 0; i < 20; ++i) ok += " 91";
  ok += " c0";
  EXPECT_TRUE(DecodeHex(ok).ok());
}

TEST(EventDecoder, UnknownMapKeysAndTrailingArrayFieldsAreTolerated) {
  // A map batch with an unknown key and an event with an unknown field; an array
  // event with fields beyond the known twelve; AllBlocksCleared with a stray field.
  DecodedBatch b = MustDecode(
      "83 a4 'what' 92 01 02 a2 'ts' 01 a6 'events' 93"
      " 84 a4 'type' ac 'BlockRemoved' a3 'new' 81 01 02 ac 'block_hashes' 91 07"
      "    a6 'medium' a4 'NVME'"
      " 9d ab 'BlockStored' 91 01 c0 91 01 04 c0 c0 c0 c0 c0 c0 c0 a5 'extra'"
      " 92 b0 'AllBlocksCleared' c0");
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.ts, 1.0);
  EXPECT_EQ(b.events[0].tier, core::Tier::kDisk);
  EXPECT_EQ(b.events[1].type, EventType::kStored);
  EXPECT_EQ(b.events[2].type, EventType::kCleared);
}

TEST(EventDecoder, UnknownMediumMakesEventUnusable) {
  DecodedBatch b = MustDecode("92 00 91 93 ac 'BlockRemoved' 91 01 a3 'TPU'");
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_FALSE(b.events[0].usable);
}

TEST(EventDecoder, MediumMapping) {
  EXPECT_EQ(TierFromMedium("GPU"), core::Tier::kDevice);
  EXPECT_EQ(TierFromMedium("gpu"), core::Tier::kDevice);
  EXPECT_EQ(TierFromMedium("CPU"), core::Tier::kHost);
  EXPECT_EQ(TierFromMedium("CPU_PINNED"), core::Tier::kHost);
  EXPECT_EQ(TierFromMedium("CPU_TIER1"), core::Tier::kHost);
  EXPECT_EQ(TierFromMedium("CPU_TIER2"), core::Tier::kDisk);
  EXPECT_EQ(TierFromMedium("DISK"), core::Tier::kDisk);
  EXPECT_EQ(TierFromMedium("NVME"), core::Tier::kDisk);
  EXPECT_EQ(TierFromMedium("HBM3"), std::nullopt);
}

TEST(EventDecoder, HashFromBytes) {
  const std::vector<uint8_t> short_bytes = {0x01, 0x02};
  EXPECT_EQ(HashFromBytes(short_bytes), 0x0102u);
}

TEST(EventDecoder, ReusedBatchIsClearedFirst) {
  DecodedBatch b;
  ASSERT_TRUE(DecodeEventBatch(HexBytes(golden::kSglangArray), b).ok());
  ASSERT_TRUE(DecodeEventBatch(HexBytes("92 00 90"), b).ok());
  EXPECT_TRUE(b.events.empty());
  EXPECT_TRUE(b.hashes.empty());
  EXPECT_TRUE(b.tokens.empty());
}

}  // namespace
}  // namespace infera::events
