// MsgpackReader: a bounds-checked, non-throwing cursor over untrusted msgpack bytes.
//
// Every read either consumes one well-formed item and returns true, or returns false
// and leaves the reader in a failed state (all later reads fail too). Nothing
// allocates; container headers are checked against the bytes left (every element
// takes at least one byte), so a forged "4 billion elements" header fails at once.
// Skip() descends at most kMaxSkipDepth levels.
//
// Thread-safety: a reader is a plain value; use one per thread.
//
// Example:
//   MsgpackReader r(payload);
//   uint32_t n;
//   if (!r.ReadArrayHeader(n)) return error;
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace infera::events {

// The msgpack family of the next item.
enum class MsgpackType : uint8_t {
  kNil,
  kBool,
  kUint,   // positive fixint, uint 8..64
  kInt,    // negative fixint, int 8..64 (either sign)
  kFloat,  // float 32/64
  kStr,
  kBin,
  kArray,
  kMap,
  kExt,
  kInvalid,  // reserved byte 0xc1, or no bytes left
};

namespace msgpack_internal {
// The type of every first byte (0xc1 and the end of input: kInvalid).
constexpr std::array<MsgpackType, 256> MakeTypeTable() {
  std::array<MsgpackType, 256> t{};
  for (int b = 0; b < 256; ++b) {
    MsgpackType m = MsgpackType::kInvalid;
    if (b <= 0x7f || (b >= 0xcc && b <= 0xcf)) {
      m = MsgpackType::kUint;
    } else if (b <= 0x8f || b == 0xde || b == 0xdf) {
      m = MsgpackType::kMap;
    } else if (b <= 0x9f || b == 0xdc || b == 0xdd) {
      m = MsgpackType::kArray;
    } else if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb)) {
      m = MsgpackType::kStr;
    } else if (b >= 0xe0 || (b >= 0xd0 && b <= 0xd3)) {
      m = MsgpackType::kInt;
    } else if (b == 0xc0) {
      m = MsgpackType::kNil;
    } else if (b == 0xc2 || b == 0xc3) {
      m = MsgpackType::kBool;
    } else if (b >= 0xc4 && b <= 0xc6) {
      m = MsgpackType::kBin;
    } else if ((b >= 0xc7 && b <= 0xc9) || (b >= 0xd4 && b <= 0xd8)) {
      m = MsgpackType::kExt;
    } else if (b == 0xca || b == 0xcb) {
      m = MsgpackType::kFloat;
    }
    t[static_cast<size_t>(b)] = m;
  }
  return t;
}
inline constexpr std::array<MsgpackType, 256> kTypeOf = MakeTypeTable();
}  // namespace msgpack_internal

class MsgpackReader {
 public:
  static constexpr int kMaxSkipDepth = 32;

  explicit MsgpackReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  bool failed() const { return failed_; }
  bool AtEnd() const { return pos_ == bytes_.size(); }
  size_t remaining() const { return bytes_.size() - pos_; }
  size_t position() const { return pos_; }

  // Type of the next item without consuming it.
  MsgpackType Peek() const {
    if (failed_ || pos_ >= bytes_.size()) return MsgpackType::kInvalid;
    return msgpack_internal::kTypeOf[bytes_[pos_]];
  }

  bool ReadNil();
  // Any integer that fits in the target type (a signed int >= 0 reads as unsigned).
  // Inline: the fixint / uint 8 / uint 16 of token ids; the rest out of line.
  bool ReadUint(uint64_t& out) {
    if (!failed_ && pos_ < bytes_.size()) {
      const uint8_t* p = bytes_.data() + pos_;
      const size_t left = bytes_.size() - pos_;
      if (p[0] <= 0x7f) {
        out = p[0];
        ++pos_;
        return true;
      }
      if (p[0] == 0xcd && left >= 3) {
        out = (uint64_t{p[1]} << 8) | p[2];
        pos_ += 3;
        return true;
      }
      if (p[0] == 0xcc && left >= 2) {
        out = p[1];
        pos_ += 2;
        return true;
      }
    }
    return ReadUintSlow(out);
  }
  bool ReadInt(int64_t& out);
  // A 64-bit integer of either sign, reinterpreted as u64 (two's complement), as
  // engines' signed and unsigned block hashes are normalised. Inline: uint 64 and
  // int 64 (9 bytes, what engines' hashes mostly take); the rest out of line.
  bool ReadInt64Bits(uint64_t& out) {
    if (!failed_ && bytes_.size() - pos_ >= 9) {
      const uint8_t* p = bytes_.data() + pos_;
      if (p[0] == 0xcf || p[0] == 0xd3) {
        uint64_t v;
        std::memcpy(&v, p + 1, 8);
        out = __builtin_bswap64(v);  // big-endian on the wire (hosts: little-endian)
        pos_ += 9;
        return true;
      }
    }
    return ReadInt64BitsSlow(out);
  }
  // A float, or an integer converted to double.
  bool ReadNumber(double& out);
  // str only. The view points into the input.
  bool ReadStr(std::string_view& out);
  // bin or str (some encoders send raw bytes as str).
  bool ReadBytes(std::span<const uint8_t>& out);
  bool ReadArrayHeader(uint32_t& count);
  bool ReadMapHeader(uint32_t& count);
  // Skips one complete item of any type (nested up to kMaxSkipDepth).
  bool Skip();

 private:
  bool Fail() {
    failed_ = true;
    return false;
  }
  bool Take(size_t n, const uint8_t*& p);
  bool ReadBE(size_t n, uint64_t& out);
  bool ReadUintSlow(uint64_t& out);
  bool ReadInt64BitsSlow(uint64_t& out);
  bool ReadAnyInt(bool& negative, uint64_t& value);
  bool SkipDepth(int depth);
  bool ReadContainerHeader(bool is_map, uint32_t& count);

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace infera::events
