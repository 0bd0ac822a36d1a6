#include "events/kv_snapshot_peer_wire.h"

#include <gtest/gtest.h>

#include <span>
#include <string>

#include "event_wire/msgpack_writer.h"

namespace infera::events {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(SnapshotPeerWireTest, SubjectsNameTheFleetAndTheInstance) {
  EXPECT_EQ(SnapshotOfferSubject("fleet.a"), "infera.router.snapshot.offer.ZmxlZXQuYQ");
  EXPECT_EQ(SnapshotChunkSubject(0xabcdef), "infera.router.snapshot.chunk.0000000000abcdef");
}

TEST(SnapshotPeerWireTest, MessagesRoundTrip) {
  const SnapshotOfferRequest q{
      .fleet = "7f3a", .transport = 1, .hash_scheme = 4, .joiner = 0xffffffffffffffffull};
  auto dq = DecodeOfferRequest(Bytes(EncodeOfferRequest(q)));
  ASSERT_TRUE(dq.ok()) << dq.status();
  EXPECT_EQ(dq->fleet, "7f3a");
  EXPECT_EQ(dq->transport, 1);
  EXPECT_EQ(dq->hash_scheme, 4u);
  EXPECT_EQ(dq->joiner, 0xffffffffffffffffull);

  const SnapshotOffer o{.instance = 9,
                        .created_unix_ms = 1'764'800'000'000,
                        .size = 1'048'577,
                        .chunk_size = kSnapshotChunkBytes,
                        .chunks = 3,
                        .checksum = 0x1234567890abcdefull};
  auto dof = DecodeOffer(Bytes(EncodeOffer(o)));
  ASSERT_TRUE(dof.ok()) << dof.status();
  EXPECT_EQ(dof->instance, 9u);
  EXPECT_EQ(dof->created_unix_ms, o.created_unix_ms);
  EXPECT_EQ(dof->size, o.size);
  EXPECT_EQ(dof->chunks, 3u);
  EXPECT_EQ(dof->checksum, o.checksum);
  EXPECT_TRUE(OfferShapeValid(*dof));

  auto dc = DecodeChunkRequest(Bytes(EncodeChunkRequest({.created_unix_ms = 5, .index = 77})));
  ASSERT_TRUE(dc.ok()) << dc.status();
  EXPECT_EQ(dc->created_unix_ms, 5);
  EXPECT_EQ(dc->index, 77u);
}

TEST(SnapshotPeerWireTest, HostileMessagesAreRefused) {
  EXPECT_FALSE(DecodeOffer(Bytes("garbage")).ok());
  EXPECT_FALSE(DecodeChunkRequest(Bytes("")).ok());
  std::string missing;  // an offer without its checksum
  MsgpackWriter w(missing);
  w.Map(1);
  w.Str("v");
  w.Uint(1);
  EXPECT_FALSE(DecodeOffer(Bytes(missing)).ok());
  std::string v2 = EncodeChunkRequest({.version = 2, .created_unix_ms = 1, .index = 0});
  EXPECT_FALSE(DecodeChunkRequest(Bytes(v2)).ok());
  std::string big = EncodeChunkRequest({.created_unix_ms = 1, .index = 0}) + std::string(5000, 0);
  EXPECT_FALSE(DecodeChunkRequest(Bytes(big)).ok());
}

TEST(SnapshotPeerWireTest, AnOfferWhoseSizesDisagreeIsNotTaken) {
  SnapshotOffer o{.size = 2 * kSnapshotChunkBytes, .chunk_size = kSnapshotChunkBytes, .chunks = 2};
  EXPECT_TRUE(OfferShapeValid(o));
  o.chunks = 3;
  EXPECT_FALSE(OfferShapeValid(o));
  o = {.size = 2 * kSnapshotChunkBytes, .chunk_size = 0, .chunks = 0};
  EXPECT_FALSE(OfferShapeValid(o));
  o = {.size = 100, .chunk_size = kSnapshotChunkBytes, .chunks = 1};  // shorter than a file
  EXPECT_FALSE(OfferShapeValid(o));
  o = {.size = 8u << 20, .chunk_size = 4u << 20, .chunks = 2};  // over NATS's 1 MiB
  EXPECT_FALSE(OfferShapeValid(o));
}

}  // namespace
}  // namespace infera::events
