#include "event_wire/msgpack_reader.h"

#include <gtest/gtest.h>

#include "event_wire/golden_payloads.h"

namespace infera::events {
namespace {

using golden::HexBytes;

TEST(MsgpackReader, Integers) {
  const auto bytes = HexBytes(
      "7f e0 cc ff cd 0100 ce 01000000 cf ffffffffffffffff d0 80 d1 8000"
      " d2 80000000 d3 8000000000000000 d0 05");
  MsgpackReader r(bytes);
  uint64_t u;
  int64_t i;
  ASSERT_TRUE(r.ReadUint(u));
  EXPECT_EQ(u, 127u);
  ASSERT_TRUE(r.ReadInt(i));
  EXPECT_EQ(i, -32);
  ASSERT_TRUE(r.ReadUint(u));
  EXPECT_EQ(u, 255u);
  ASSERT_TRUE(r.ReadUint(u));
  EXPECT_EQ(u, 256u);
  ASSERT_TRUE(r.ReadUint(u));
  EXPECT_EQ(u, 1u << 24);
  ASSERT_TRUE(r.ReadInt64Bits(u));
  EXPECT_EQ(u, ~uint64_t{0});
  ASSERT_TRUE(r.ReadInt(i));
  EXPECT_EQ(i, -128);
  ASSERT_TRUE(r.ReadInt(i));
  EXPECT_EQ(i, -32768);
  ASSERT_TRUE(r.ReadInt(i));
  EXPECT_EQ(i, INT32_MIN);
  ASSERT_TRUE(r.ReadInt(i));
  EXPECT_EQ(i, INT64_MIN);
  ASSERT_TRUE(r.ReadUint(u));  // a non-negative signed int reads as unsigned
  EXPECT_EQ(u, 5u);
  EXPECT_TRUE(r.AtEnd());
}

TEST(MsgpackReader, RangeErrorsFail) {
  const auto neg = HexBytes("ff");
  MsgpackReader r1(neg);
  uint64_t u;
  EXPECT_FALSE(r1.ReadUint(u));
  EXPECT_TRUE(r1.failed());
  const auto big = HexBytes("cf ffffffffffffffff");
  MsgpackReader r2(big);
  int64_t i;
  EXPECT_FALSE(r2.ReadInt(i));
}

TEST(MsgpackReader, FloatsStringsBytes) {
  const auto bytes = HexBytes("ca 3fc00000 cb 3ff8000000000000 a3 'abc' d9 03 'xyz' c4 02 0102");
  MsgpackReader r(bytes);
  double d;
  ASSERT_TRUE(r.ReadNumber(d));
  EXPECT_EQ(d, 1.5);
  ASSERT_TRUE(r.ReadNumber(d));
  EXPECT_EQ(d, 1.5);
  std::string_view s;
  ASSERT_TRUE(r.ReadStr(s));
  EXPECT_EQ(s, "abc");
  ASSERT_TRUE(r.ReadStr(s));
  EXPECT_EQ(s, "xyz");
  std::span<const uint8_t> b;
  ASSERT_TRUE(r.ReadBytes(b));
  EXPECT_EQ(b.size(), 2u);
  EXPECT_TRUE(r.AtEnd());
}

TEST(MsgpackReader, ContainerHeadersAreBoundedByRemainingBytes) {
  const auto bytes = HexBytes("dd 00000003 01 02");
  MsgpackReader r(bytes);
  uint32_t n;
  EXPECT_FALSE(r.ReadArrayHeader(n));
  const auto map = HexBytes("81 01");
  MsgpackReader m(map);
  EXPECT_FALSE(m.ReadMapHeader(n));
}

TEST(MsgpackReader, SkipsEveryType) {
  const auto bytes = HexBytes(
      "c0 c2 c3 01 ff cc 01 d3 0000000000000001 ca 00000000 cb 0000000000000000 a1 'x'"
      " c4 01 00 d4 01 02 c7 02 05 0102 82 01 92 02 03 04 c0 de 0001 01 01 dc 0001 01");
  MsgpackReader r(bytes);
  int items = 0;
  while (!r.AtEnd()) {
    ASSERT_TRUE(r.Skip()) << "item " << items;
    ++items;
  }
  EXPECT_EQ(items, 16);
}

TEST(MsgpackReader, FailureIsSticky) {
  const auto bytes = HexBytes("c1 01");
  MsgpackReader r(bytes);
  EXPECT_FALSE(r.Skip());
  uint64_t u;
  EXPECT_FALSE(r.ReadUint(u));
}

// Peek's type of every first byte (the msgpack spec's format table).
TEST(MsgpackReader, PeekTypesEveryFirstByte) {
  struct Range {
    int lo, hi;
    MsgpackType type;
  };
  const Range ranges[] = {
      {0x00, 0x7f, MsgpackType::kUint},  {0x80, 0x8f, MsgpackType::kMap},
      {0x90, 0x9f, MsgpackType::kArray}, {0xa0, 0xbf, MsgpackType::kStr},
      {0xc0, 0xc0, MsgpackType::kNil},   {0xc1, 0xc1, MsgpackType::kInvalid},
      {0xc2, 0xc3, MsgpackType::kBool},  {0xc4, 0xc6, MsgpackType::kBin},
      {0xc7, 0xc9, MsgpackType::kExt},   {0xca, 0xcb, MsgpackType::kFloat},
      {0xcc, 0xcf, MsgpackType::kUint},  {0xd0, 0xd3, MsgpackType::kInt},
      {0xd4, 0xd8, MsgpackType::kExt},   {0xd9, 0xdb, MsgpackType::kStr},
      {0xdc, 0xdd, MsgpackType::kArray}, {0xde, 0xdf, MsgpackType::kMap},
      {0xe0, 0xff, MsgpackType::kInt},
  };
  int covered = 0;
  for (const Range& range : ranges) {
    for (int b = range.lo; b <= range.hi; ++b, ++covered) {
      const uint8_t byte = static_cast<uint8_t>(b);
      EXPECT_EQ(MsgpackReader(std::span<const uint8_t>(&byte, 1)).Peek(), range.type) << b;
    }
  }
  EXPECT_EQ(covered, 256);
  EXPECT_EQ(MsgpackReader(std::span<const uint8_t>()).Peek(), MsgpackType::kInvalid);
}

// The inline fast paths (uint 8 / 16 token ids, 9-byte hashes) check the bytes left.
TEST(MsgpackReader, TruncatedIntegersFail) {
  for (const char* hex : {"cc", "cd 01", "ce 010000", "cf 01020304050607", "d3 01"}) {
    const auto bytes = HexBytes(hex);
    MsgpackReader r1(bytes);
    uint64_t u;
    EXPECT_FALSE(r1.ReadUint(u)) << hex;
    EXPECT_TRUE(r1.failed()) << hex;
    MsgpackReader r2(bytes);
    EXPECT_FALSE(r2.ReadInt64Bits(u)) << hex;
    EXPECT_TRUE(r2.failed()) << hex;
  }
  const auto hashes = HexBytes("cf 0102030405060708 d3 fffffffffffffffe");
  MsgpackReader r(hashes);
  uint64_t u;
  ASSERT_TRUE(r.ReadInt64Bits(u));
  EXPECT_EQ(u, 0x0102030405060708u);
  ASSERT_TRUE(r.ReadInt64Bits(u));
  EXPECT_EQ(u, ~uint64_t{1});
  EXPECT_TRUE(r.AtEnd());
}

}  // namespace
}  // namespace infera::events
