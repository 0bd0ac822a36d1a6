#include "engine_events/event_encoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "event_wire/golden_payloads.h"
#include "events/event_decoder.h"

namespace infera::events {
namespace {

using ::testing::ElementsAre;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(EventEncoder, SglangShapeMatchesGoldenBytes) {
  EventBatch batch{
      .ts = 1.5,
      .events = {
          Stored{.engine_hashes = {1, 2}, .token_ids = {1, 2, 3, 4, 5, 6, 7, 8}, .block_size = 4},
          Removed{.engine_hashes = {2}}, AllCleared{}}};
  EXPECT_EQ(Bytes(EncodeEventBatch(batch, WireShape::kSglang)),
            golden::HexBytes(golden::kSglangArray));
}

TEST(EventEncoder, SglangDpRankAndMediumMatchesGoldenBytes) {
  EventBatch batch{.ts = 2.0,
                   .events = {Stored{.engine_hashes = {10},
                                     .token_ids = {1, 2, 3, 4},
                                     .block_size = 4,
                                     .medium = "CPU"},
                              Removed{.engine_hashes = {10}, .medium = "CPU"}},
                   .dp_rank = 3};
  EXPECT_EQ(Bytes(EncodeEventBatch(batch, WireShape::kSglang)),
            golden::HexBytes(golden::kSglangDpRankMedium));
}

TEST(EventEncoder, VllmMapShapeMatchesDocumentedLayout) {
  EventBatch batch{.ts = 3.0,
                   .events = {Stored{.engine_hashes = {5},
                                     .parent = 0xffffffffffffffffull,
                                     .token_ids = {9, 10, 11, 12},
                                     .block_size = 4},
                              Removed{.engine_hashes = {5}}}};
  // Same events as golden::kVllmArrayOfMaps, but in today's map batch.
  EXPECT_EQ(
      Bytes(EncodeEventBatch(batch, WireShape::kVllm)),
      golden::HexBytes("82 a2 'ts' cb 4008000000000000 a6 'events' 92"
                       " 88 a4 'type' ab 'BlockStored' ac 'block_hashes' 91 05"
                       "    b1 'parent_block_hash' cf ffffffffffffffff"
                       "    a9 'token_ids' 94 09 0a 0b 0c aa 'block_size' 04"
                       "    a7 'lora_id' c0 a6 'medium' c0 a9 'lora_name' c0"
                       " 83 a4 'type' ac 'BlockRemoved' ac 'block_hashes' 91 05 a6 'medium' c0"));
}

TEST(EventEncoder, RoundTripsEveryShapeThroughTheDecoder) {
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 300; ++i) tokens.push_back(i * 1000);
  std::vector<uint64_t> hashes;
  for (uint64_t i = 0; i < 20; ++i) hashes.push_back(i << 60 | i);
  EventBatch batch{.ts = 12.25,
                   .events = {Stored{.engine_hashes = hashes,
                                     .parent = 42,
                                     .token_ids = tokens,
                                     .block_size = 15,
                                     .medium = "CPU_TIER2",
                                     .lora_id = -3},
                              Removed{.engine_hashes = {7, 8}, .medium = "GPU"}, AllCleared{}},
                   .dp_rank = 70000};
  for (WireShape shape : {WireShape::kVllm, WireShape::kVllmArray, WireShape::kSglang}) {
    const std::string payload = EncodeEventBatch(batch, shape);
    DecodedBatch d;
    ASSERT_TRUE(DecodeEventBatch(Bytes(payload), d).ok());
    EXPECT_EQ(d.ts, 12.25);
    EXPECT_EQ(d.dp_rank, 70000);
    ASSERT_EQ(d.events.size(), 3u);
    auto h = d.HashesOf(d.events[0]);
    EXPECT_EQ(std::vector<uint64_t>(h.begin(), h.end()), hashes);
    auto t = d.TokensOf(d.events[0]);
    EXPECT_EQ(std::vector<uint32_t>(t.begin(), t.end()), tokens);
    EXPECT_EQ(d.events[0].parent_hash, 42u);
    EXPECT_EQ(d.events[0].block_size, 15u);
    EXPECT_EQ(d.events[0].tier, core::Tier::kDisk);
    EXPECT_EQ(d.events[0].lora_id, -3);
    EXPECT_EQ(d.events[1].tier, core::Tier::kDevice);
    auto r = d.HashesOf(d.events[1]);
    EXPECT_THAT(std::vector<uint64_t>(r.begin(), r.end()), ElementsAre(7, 8));
    EXPECT_EQ(d.events[2].type, EventType::kCleared);
  }
}

}  // namespace
}  // namespace infera::events
