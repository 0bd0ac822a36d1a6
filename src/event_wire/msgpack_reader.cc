#include "event_wire/msgpack_reader.h"

#include <bit>
#include <cstring>

namespace infera::events {

static_assert(std::endian::native == std::endian::little,
              "ReadInt64Bits byte-swaps a big-endian load; port for big-endian hosts");

bool MsgpackReader::Take(size_t n, const uint8_t*& p) {
  if (failed_ || n > bytes_.size() - pos_) return Fail();
  p = bytes_.data() + pos_;
  pos_ += n;
  return true;
}

bool MsgpackReader::ReadBE(size_t n, uint64_t& out) {
  const uint8_t* p;
  if (!Take(n, p)) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  out = v;
  return true;
}

bool MsgpackReader::ReadNil() {
  if (Peek() != MsgpackType::kNil) return Fail();
  ++pos_;
  return true;
}

bool MsgpackReader::ReadAnyInt(bool& negative, uint64_t& value) {
  if (failed_ || pos_ >= bytes_.size()) return Fail();
  const uint8_t b = bytes_[pos_];
  if (b <= 0x7f || b >= 0xe0) {  // positive / negative fixint
    ++pos_;
    value = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(b)));
    negative = b >= 0xe0;
    if (!negative) value = b;
    return true;
  }
  size_t n;
  switch (b) {
    case 0xcc:
    case 0xd0:
      n = 1;
      break;
    case 0xcd:
    case 0xd1:
      n = 2;
      break;
    case 0xce:
    case 0xd2:
      n = 4;
      break;
    case 0xcf:
    case 0xd3:
      n = 8;
      break;
    default:
      return Fail();
  }
  ++pos_;
  uint64_t bits;
  if (!ReadBE(n, bits)) return false;
  if (b <= 0xcf) {  // unsigned
    negative = false;
    value = bits;
    return true;
  }
  // Sign-extend a signed int of n bytes.
  const int shift = static_cast<int>(64 - 8 * n);
  value = static_cast<uint64_t>(static_cast<int64_t>(bits << shift) >> shift);
  negative = static_cast<int64_t>(value) < 0;
  return true;
}

bool MsgpackReader::ReadUintSlow(uint64_t& out) {
  bool negative;
  uint64_t v;
  if (!ReadAnyInt(negative, v) || negative) return Fail();
  out = v;
  return true;
}

bool MsgpackReader::ReadInt(int64_t& out) {
  bool negative;
  uint64_t v;
  if (!ReadAnyInt(negative, v)) return Fail();
  // A u64 above INT64_MAX does not fit.
  if (!negative && v > static_cast<uint64_t>(INT64_MAX)) return Fail();
  out = static_cast<int64_t>(v);
  return true;
}

bool MsgpackReader::ReadInt64BitsSlow(uint64_t& out) {
  bool negative;
  uint64_t v;
  if (!ReadAnyInt(negative, v)) return Fail();
  out = v;
  return true;
}

bool MsgpackReader::ReadNumber(double& out) {
  const MsgpackType t = Peek();
  if (t == MsgpackType::kFloat) {
    const uint8_t b = bytes_[pos_++];
    uint64_t bits;
    if (b == 0xca) {
      if (!ReadBE(4, bits)) return false;
      out = std::bit_cast<float>(static_cast<uint32_t>(bits));
    } else {
      if (!ReadBE(8, bits)) return false;
      out = std::bit_cast<double>(bits);
    }
    return true;
  }
  if (t == MsgpackType::kUint) {
    uint64_t v;
    if (!ReadUint(v)) return false;
    out = static_cast<double>(v);
    return true;
  }
  if (t == MsgpackType::kInt) {
    int64_t v;
    if (!ReadInt(v)) return false;
    out = static_cast<double>(v);
    return true;
  }
  return Fail();
}

bool MsgpackReader::ReadStr(std::string_view& out) {
  if (Peek() != MsgpackType::kStr) return Fail();
  const uint8_t b = bytes_[pos_++];
  uint64_t len;
  if (b <= 0xbf) {
    len = b & 0x1f;
  } else if (!ReadBE(b == 0xd9 ? 1 : b == 0xda ? 2 : 4, len)) {
    return false;
  }
  const uint8_t* p;
  if (!Take(len, p)) return false;
  out = std::string_view(reinterpret_cast<const char*>(p), len);
  return true;
}

bool MsgpackReader::ReadBytes(std::span<const uint8_t>& out) {
  const MsgpackType t = Peek();
  if (t == MsgpackType::kStr) {
    std::string_view s;
    if (!ReadStr(s)) return false;
    out = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    return true;
  }
  if (t != MsgpackType::kBin) return Fail();
  const uint8_t b = bytes_[pos_++];
  uint64_t len;
  if (!ReadBE(b == 0xc4 ? 1 : b == 0xc5 ? 2 : 4, len)) return false;
  const uint8_t* p;
  if (!Take(len, p)) return false;
  out = std::span<const uint8_t>(p, len);
  return true;
}

bool MsgpackReader::ReadContainerHeader(bool is_map, uint32_t& count) {
  const MsgpackType t = Peek();
  if (t != (is_map ? MsgpackType::kMap : MsgpackType::kArray)) return Fail();
  const uint8_t b = bytes_[pos_++];
  uint64_t n;
  if (b <= 0x9f) {
    n = b & 0x0f;
  } else if (!ReadBE((b == 0xdc || b == 0xde) ? 2 : 4, n)) {
    return false;
  }
  // Each element (each key and value of a map) takes at least one byte.
  const uint64_t min_bytes = is_map ? 2 * n : n;
  if (min_bytes > remaining()) return Fail();
  count = static_cast<uint32_t>(n);
  return true;
}

bool MsgpackReader::ReadArrayHeader(uint32_t& count) { return ReadContainerHeader(false, count); }
bool MsgpackReader::ReadMapHeader(uint32_t& count) { return ReadContainerHeader(true, count); }

bool MsgpackReader::Skip() { return SkipDepth(0); }

bool MsgpackReader::SkipDepth(int depth) {
  if (depth > kMaxSkipDepth) return Fail();
  const MsgpackType t = Peek();
  const uint8_t b = t == MsgpackType::kInvalid ? 0 : bytes_[pos_];
  const uint8_t* p;
  switch (t) {
    case MsgpackType::kNil:
    case MsgpackType::kBool:
      ++pos_;
      return true;
    case MsgpackType::kUint:
    case MsgpackType::kInt: {
      uint64_t v;
      return ReadInt64Bits(v);
    }
    case MsgpackType::kFloat:
      ++pos_;
      return Take(b == 0xca ? 4 : 8, p);
    case MsgpackType::kStr:
    case MsgpackType::kBin: {
      std::span<const uint8_t> s;
      return ReadBytes(s);
    }
    case MsgpackType::kExt: {
      ++pos_;
      uint64_t len;
      switch (b) {
        case 0xd4:
          len = 1;
          break;
        case 0xd5:
          len = 2;
          break;
        case 0xd6:
          len = 4;
          break;
        case 0xd7:
          len = 8;
          break;
        case 0xd8:
          len = 16;
          break;
        default:
          if (!ReadBE(b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4, len)) return false;
      }
      return Take(len + 1, p);  // type byte + data
    }
    case MsgpackType::kArray:
    case MsgpackType::kMap: {
      const bool is_map = t == MsgpackType::kMap;
      uint32_t n;
      if (!ReadContainerHeader(is_map, n)) return false;
      const uint64_t items = is_map ? 2ull * n : n;
      for (uint64_t i = 0; i < items; ++i) {
        if (!SkipDepth(depth + 1)) return false;
      }
      return true;
    }
    case MsgpackType::kInvalid:
      return Fail();
  }
  return Fail();
}

}  // namespace infera::events
