#include "events/event_applier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/hashing.h"
#include "engine_events/event_encoder.h"
#include "event_wire/golden_payloads.h"

namespace infera::events {
namespace {

using core::BlockHash;
using core::HashChunk;
using core::Tier;
using golden::HexBytes;
using ::testing::UnorderedElementsAre;

BlockHash H(BlockHash parent, std::vector<core::TokenId> tokens) {
  return HashChunk(parent, tokens);
}

DecodedBatch Decode(std::string_view hex) {
  DecodedBatch b;
  absl::Status s = DecodeEventBatch(HexBytes(hex), b);
  EXPECT_TRUE(s.ok()) << s;
  return b;
}

// The batch cut to its first `n` events (hash/token ranges stay valid).
DecodedBatch Prefix(DecodedBatch b, size_t n) {
  b.events.resize(n);
  return b;
}

class ApplierTest : public ::testing::Test {
 protected:
  core::TargetId Target(size_t block_size = 4) { return index_.AddTarget({"w:1", 0}, block_size); }
  std::vector<BlockHash> View(core::TargetId id) { return index_.RouterHashes(id); }

  core::KvIndex index_;
  TargetApplyState state_;
};

TEST_F(ApplierTest, GoldenValuesOfTheHashChain) {
  EXPECT_EQ(H(0, {1, 2, 3, 4}), 0x341839abbe30be0bull);
  EXPECT_EQ(H(0x341839abbe30be0bull, {5, 6, 7, 8}), 0x37b6de0623bdb5caull);
}

TEST_F(ApplierTest, SglangArrayStoredRemovedCleared) {
  const BlockHash h0 = 0x341839abbe30be0bull, h1 = 0x37b6de0623bdb5caull;
  const DecodedBatch b = Decode(golden::kSglangArray);
  for (size_t n = 1; n <= 3; ++n) {
    core::KvIndex index;
    const core::TargetId id = index.AddTarget({"w:1", 0}, 4);
    TargetApplyState state;
    const ApplyStats stats = ApplyEventBatch(index, id, Prefix(b, n), state);
    EXPECT_EQ(stats.events, n);
    if (n == 1) {
      EXPECT_THAT(index.RouterHashes(id), UnorderedElementsAre(h0, h1));
    } else if (n == 2) {
      EXPECT_THAT(index.RouterHashes(id), UnorderedElementsAre(h0));
    } else {
      EXPECT_TRUE(index.RouterHashes(id).empty());
      EXPECT_EQ(stats.last_clear_index, 2);
    }
  }
}

TEST_F(ApplierTest, SglangMediumGoesToHostTier) {
  const core::TargetId id = Target();
  const DecodedBatch b = Decode(golden::kSglangDpRankMedium);
  ApplyEventBatch(index_, id, Prefix(b, 1), state_);
  const BlockHash h = H(0, {1, 2, 3, 4});
  EXPECT_THAT(View(id), UnorderedElementsAre(h));
  EXPECT_TRUE(index_.Holds(id, h, Tier::kHost));
  EXPECT_FALSE(index_.Holds(id, h, Tier::kDevice));
  const ApplyStats stats = ApplyEventBatch(index_, id, b, state_);  // store again + remove
  EXPECT_EQ(stats.blocks_removed, 1u);
  EXPECT_TRUE(View(id).empty());
}

TEST_F(ApplierTest, VllmMapSignedHashesMapToRouterHashes) {
  const core::TargetId id = Target();
  ApplyStats stats = ApplyEventBatch(index_, id, Decode(golden::kVllmMap), state_);
  EXPECT_EQ(stats.blocks_stored, 2u);
  const BlockHash h0 = H(0, {1, 2, 3, 4}), h1 = H(h0, {5, 6, 7, 8});
  EXPECT_THAT(View(id), UnorderedElementsAre(h0, h1));
  EXPECT_TRUE(index_.Holds(id, h1, Tier::kDevice));
  // The engine hashes (-1 and INT64_MIN as u64) now name those blocks.
  const std::vector<BlockHash> engine = {0xffffffffffffffffull};
  EXPECT_EQ(index_.ApplyRemoved(id, engine, Tier::kDevice).removed, 1u);
  EXPECT_THAT(View(id), UnorderedElementsAre(h1));
}

TEST_F(ApplierTest, VllmArrayOfMapsResolvesParentThroughTheMap) {
  const core::TargetId id = Target();
  // The parent block arrived in an earlier batch under engine hash 2^64-1.
  const std::vector<BlockHash> parent_engine = {0xffffffffffffffffull};
  const std::vector<core::TokenId> parent_tokens = {1, 2, 3, 4};
  ASSERT_EQ(index_.ApplyStored(id, std::nullopt, parent_engine, parent_tokens, Tier::kDevice),
            core::StoreOutcome::kOk);
  const BlockHash p = H(0, {1, 2, 3, 4});
  const BlockHash c = H(p, {9, 10, 11, 12});
  const DecodedBatch b = Decode(golden::kVllmArrayOfMaps);
  ApplyEventBatch(index_, id, Prefix(b, 1), state_);
  EXPECT_THAT(View(id), UnorderedElementsAre(p, c));
  ApplyEventBatch(index_, id, DecodedBatch(b), state_);  // stores c again, then removes it
  EXPECT_THAT(View(id), UnorderedElementsAre(p));
}

TEST_F(ApplierTest, UnknownParentIsCountedAndNothingIsApplied) {
  const core::TargetId id = Target();
  const ApplyStats stats =
      ApplyEventBatch(index_, id, Prefix(Decode(golden::kVllmArrayOfMaps), 1), state_);
  EXPECT_EQ(stats.unknown_parents, 1u);
  EXPECT_EQ(stats.events, 0u);
  EXPECT_TRUE(View(id).empty());
}

TEST_F(ApplierTest, BytesHashesAndDiskTier) {
  const core::TargetId id = Target();
  const std::vector<BlockHash> parent_engine = {0x1112131415161718ull};
  const std::vector<core::TokenId> parent_tokens = {5, 6, 7, 8};
  index_.ApplyStored(id, std::nullopt, parent_engine, parent_tokens, Tier::kDevice);
  const BlockHash p = H(0, {5, 6, 7, 8});
  // The event's extra_keys [["mm", 1]] hold a multimodal tuple: the block cannot be
  // attributed (doc/kv-events.md §3 "Extra keys") and is hashed to be never matched.
  const BlockHash c =
      HashChunk(p, std::vector<core::TokenId>{1, 2, 3, 4}, core::kUnattributableKey);
  ApplyEventBatch(index_, id, Decode(golden::kVllmBytesHashes), state_);
  EXPECT_THAT(View(id), UnorderedElementsAre(p, c));
  EXPECT_TRUE(index_.Holds(id, c, Tier::kDisk));
  const std::vector<BlockHash> child_engine = {0x0102030405060708ull};
  EXPECT_EQ(index_.ApplyRemoved(id, child_engine, Tier::kDisk).removed, 1u);
}

TEST_F(ApplierTest, GroupsKindsAndBigrams) {
  const core::TargetId id = Target();
  const ApplyStats stats = ApplyEventBatch(index_, id, Decode(golden::kGroupsAndBigrams), state_);
  EXPECT_EQ(stats.skipped_events, 3u);
  EXPECT_EQ(stats.events, 1u);
  EXPECT_THAT(View(id), UnorderedElementsAre(H(0, {1, 2, 3, 4})));
}

TEST_F(ApplierTest, GroupKindsAreLearnedPerTarget) {
  const core::TargetId id = Target();
  // Group 1 is full attention, group 0 sliding window; both store the same engine hash 9.
  ApplyEventBatch(index_, id,
                  Decode("92 00 92"
                         " 9b ab 'BlockStored' 91 09 c0 94 01 02 03 04 04 c0 c0 c0 c0 01"
                         "    ae 'full_attention'"
                         " 9b ab 'BlockStored' 91 09 c0 94 01 02 03 04 04 c0 c0 c0 c0 00"
                         "    ae 'sliding_window'"),
                  state_);
  const BlockHash h = H(0, {1, 2, 3, 4});
  EXPECT_THAT(View(id), UnorderedElementsAre(h));
  // A removal in the sliding-window group leaves the full-attention block alone...
  ApplyEventBatch(index_, id, Decode("92 00 91 94 ac 'BlockRemoved' 91 09 c0 00"), state_);
  EXPECT_THAT(View(id), UnorderedElementsAre(h));
  // ... and one in group 1 removes it.
  ApplyEventBatch(index_, id, Decode("92 00 91 94 ac 'BlockRemoved' 91 09 c0 01"), state_);
  EXPECT_TRUE(View(id).empty());
}

TEST_F(ApplierTest, BlockSizeMismatchIsReported) {
  const core::TargetId id = Target(/*block_size=*/8);
  const ApplyStats stats = ApplyEventBatch(index_, id, Decode(golden::kSglangArray), state_);
  EXPECT_EQ(stats.mismatched_block_size, 4u);
  EXPECT_EQ(stats.count_mismatches, 1u);  // 2 engine hashes, 1 router block of 8
}

TEST_F(ApplierTest, UnknownMediumIsSkipped) {
  const core::TargetId id = Target();
  const ApplyStats stats = ApplyEventBatch(
      index_, id, Decode("92 00 91 97 ab 'BlockStored' 91 01 c0 94 01 02 03 04 04 c0 a3 'TPU'"),
      state_);
  EXPECT_EQ(stats.skipped_events, 1u);
  EXPECT_TRUE(View(id).empty());
}

// ---- Extra keys: cache_salt, LoRA, multimodal (doc/kv-events.md §3 "Extra keys") ----

std::vector<BlockHash> Chain(std::vector<core::TokenId> tokens, const core::HashKeys& keys,
                             BlockHash parent = 0) {
  std::vector<BlockHash> out;
  core::AppendChain(tokens, 4, parent, keys, out);
  return out;
}

const core::HashKeys kSalted{.salt = core::KeyDigest("tenant-a")};
const core::HashKeys kLora{.adapter = core::KeyDigest("sql-lora")};
const core::HashKeys kSaltedLora{.salt = core::KeyDigest("tenant-a"),
                                 .adapter = core::KeyDigest("sql-lora")};

DecodedBatch Encoded(std::vector<KvEvent> events) {
  const std::string payload =
      EncodeEventBatch(EventBatch{.events = std::move(events)}, WireShape::kVllm);
  DecodedBatch b;
  EXPECT_TRUE(DecodeEventBatch(
                  std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()), b)
                  .ok());
  return b;
}

TEST_F(ApplierTest, SaltedLoraEventsHashAsTheRequestsDo) {
  const core::TargetId id = Target();
  const ApplyStats stats = ApplyEventBatch(index_, id, Decode(golden::kVllmSaltedLora), state_);
  EXPECT_EQ(stats.events, 2u);
  EXPECT_EQ(stats.unattributed_events, 0u);
  // Exactly the chain a request for adapter sql-lora with cache_salt tenant-a hashes.
  const std::vector<BlockHash> want = Chain({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, kSaltedLora);
  EXPECT_THAT(View(id), UnorderedElementsAre(want[0], want[1], want[2]));
  // ... and no block of the same tokens without the salt, without the adapter, or plain.
  for (const core::HashKeys& other : {core::HashKeys{}, kSalted, kLora}) {
    for (BlockHash h : Chain({1, 2, 3, 4, 5, 6, 7, 8}, other)) {
      EXPECT_FALSE(index_.Holds(id, h, Tier::kDevice));
    }
  }
}

TEST_F(ApplierTest, MultimodalBlocksAreNeverMatched) {
  const core::TargetId id = Target();
  const ApplyStats stats = ApplyEventBatch(index_, id, Decode(golden::kVllmMultimodal), state_);
  EXPECT_EQ(stats.unattributed_events, 1u);
  // Block 0 (no extra keys) is plain; block 1 holds an image: unattributable.
  const BlockHash b0 = H(0, {1, 2, 3, 4});
  const BlockHash b1 =
      HashChunk(b0, std::vector<core::TokenId>{5, 6, 7, 8}, core::kUnattributableKey);
  EXPECT_THAT(View(id), UnorderedElementsAre(b0, b1));
}

TEST_F(ApplierTest, SaltOnTheWireEntersOnlyAChainsFirstBlock) {
  const core::TargetId id = Target();
  ApplyEventBatch(
      index_, id,
      Encoded({Stored{.engine_hashes = {1, 2},
                      .token_ids = {1, 2, 3, 4, 5, 6, 7, 8},
                      .block_size = 4,
                      .extra_keys = {{std::vector<std::string>{"tenant-a"}, std::nullopt}}},
               Stored{.engine_hashes = {3},
                      .parent = 2,
                      .token_ids = {9, 10, 11, 12},
                      .block_size = 4,
                      .extra_keys = {{std::nullopt}}}}),
      state_);
  const std::vector<BlockHash> want = Chain({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, kSalted);
  EXPECT_THAT(View(id), UnorderedElementsAre(want[0], want[1], want[2]));
}

TEST_F(ApplierTest, SaltBlindWireIsPlainUntilSaltedTrafficThenUnattributable) {
  // Older vLLM and SGLang send no extra_keys: a chain's first block may carry any salt.
  auto root = [](uint64_t engine, std::vector<core::TokenId> tokens) {
    return Stored{.engine_hashes = {engine}, .token_ids = std::move(tokens), .block_size = 4};
  };
  const core::TargetId id = Target();
  ApplyEventBatch(index_, id, Encoded({root(1, {1, 2, 3, 4})}), state_);
  EXPECT_THAT(View(id), UnorderedElementsAre(H(0, {1, 2, 3, 4})));  // today's behaviour
  index_.NoteSaltedTraffic();                                       // a salted request routed
  const ApplyStats stats = ApplyEventBatch(
      index_, id,
      Encoded(
          {root(2, {5, 6, 7, 8}),
           Stored{.engine_hashes = {3}, .parent = 2, .token_ids = {9, 9, 9, 9}, .block_size = 4},
           Stored{.engine_hashes = {4}, .parent = 1, .token_ids = {9, 9, 9, 9}, .block_size = 4}}),
      state_);
  EXPECT_EQ(stats.unattributed_events, 1u);
  const BlockHash q =
      HashChunk(0, std::vector<core::TokenId>{5, 6, 7, 8}, core::kUnattributableKey);
  // The new chain and its child are unattributable: no request's chain holds them. A
  // child of a block stored before stays matched through its parent.
  EXPECT_THAT(View(id), UnorderedElementsAre(H(0, {1, 2, 3, 4}), q, H(q, {9, 9, 9, 9}),
                                             H(H(0, {1, 2, 3, 4}), {9, 9, 9, 9})));
  for (const core::HashKeys& any : {core::HashKeys{}, kSalted}) {
    EXPECT_FALSE(index_.Holds(id, Chain({5, 6, 7, 8}, any)[0], Tier::kDevice));
  }
}

TEST_F(ApplierTest, AnAdapterKnownByIdOnlyIsUnattributable) {
  const core::TargetId id = Target();
  ApplyEventBatch(
      index_, id,
      Encoded(
          {Stored{.engine_hashes = {1}, .token_ids = {1, 2, 3, 4}, .block_size = 4, .lora_id = 3}}),
      state_);
  EXPECT_THAT(View(id), UnorderedElementsAre(HashChunk(0, std::vector<core::TokenId>{1, 2, 3, 4},
                                                       core::kUnattributableKey)));
}

TEST_F(ApplierTest, LoraEventsWithoutExtraKeysUseLoraName) {
  const core::TargetId id = Target();
  ApplyEventBatch(index_, id,
                  Encoded({Stored{.engine_hashes = {1, 2},
                                  .token_ids = {1, 2, 3, 4, 5, 6, 7, 8},
                                  .block_size = 4,
                                  .lora_id = 1,
                                  .lora_name = "sql-lora"}}),
                  state_);
  const std::vector<BlockHash> want = Chain({1, 2, 3, 4, 5, 6, 7, 8}, kLora);
  EXPECT_THAT(View(id), UnorderedElementsAre(want[0], want[1]));
}

// AttributeStoredKeys, case by case, on decoded events.
core::StoredKeys Attribute(Stored s, bool salted_traffic = false) {
  const DecodedBatch b = Encoded({std::move(s)});
  return AttributeStoredKeys(b.events.at(0), salted_traffic);
}

TEST(AttributeStoredKeysTest, EachWireShape) {
  const uint64_t a = core::KeyDigest("sql-lora"), t = core::KeyDigest("tenant-a");
  using Keys = std::vector<std::optional<std::vector<std::string>>>;
  using L = std::vector<std::string>;
  const Stored base{.engine_hashes = {1, 2}, .token_ids = {1, 2, 3, 4, 5, 6, 7, 8}};
  auto with = [&](auto f) {
    Stored s = base;
    f(s);
    return s;
  };
  EXPECT_EQ(Attribute(base), core::StoredKeys{});
  // Salt-blind wire.
  EXPECT_EQ(Attribute(base, true).salt, core::kUnattributableKey);
  EXPECT_EQ(Attribute(with([](Stored& s) { s.parent = 9; }), true), core::StoredKeys{});
  // extra_keys present.
  EXPECT_EQ(Attribute(with([](Stored& s) {
                        s.extra_keys = Keys{std::nullopt, std::nullopt};
                      }),
                      true),
            core::StoredKeys{});
  EXPECT_EQ(Attribute(with([](Stored& s) {
              s.extra_keys = Keys{L{"tenant-a"}, std::nullopt};
            })),
            (core::StoredKeys{.salt = t}));
  EXPECT_EQ(Attribute(with([](Stored& s) {
              s.lora_id = 1;
              s.lora_name = "sql-lora";
              s.extra_keys = Keys{L{"sql-lora", "tenant-a"}, L{"sql-lora"}};
            })),
            (core::StoredKeys{.adapter = a, .salt = t}));
  // A salt on a block that does not start a chain, a LoRA entry that names another
  // adapter or lacks it, a second block with a string: unattributable from there.
  EXPECT_EQ(Attribute(with([](Stored& s) {
              s.parent = 9;
              s.extra_keys = Keys{L{"tenant-a"}, std::nullopt};
            })).unattributable_from,
            0u);
  EXPECT_EQ(Attribute(with([](Stored& s) {
              s.lora_name = "sql-lora";
              s.extra_keys = Keys{L{"other"}, L{"sql-lora"}};
            })).unattributable_from,
            0u);
  EXPECT_EQ(Attribute(with([](Stored& s) {
              s.lora_name = "sql-lora";
              s.extra_keys = Keys{L{"sql-lora"}, std::nullopt};
            })).unattributable_from,
            1u);
  EXPECT_EQ(Attribute(with([](Stored& s) {
              s.extra_keys = Keys{std::nullopt, L{"x"}};
            })).unattributable_from,
            1u);
  // One entry per block, or none of it is attributable.
  EXPECT_EQ(
      Attribute(with([](Stored& s) { s.extra_keys = Keys{std::nullopt}; })).unattributable_from,
      0u);
}

}  // namespace
}  // namespace infera::events
