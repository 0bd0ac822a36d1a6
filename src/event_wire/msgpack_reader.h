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

#include <cstddef>
#include <cstdint>
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

class MsgpackReader {
 public:
  static constexpr int kMaxSkipDepth = 32;

  explicit MsgpackReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  bool failed() const { return failed_; }
  bool AtEnd() const { return pos_ == bytes_.size(); }
  size_t remaining() const { return bytes_.size() - pos_; }
  size_t position() const { return pos_; }

  // Type of the next item without consuming it.
  MsgpackType Peek() const;

  bool ReadNil();
  // Any integer that fits in the target type (a signed int >= 0 reads as unsigned).
  bool ReadUint(uint64_t& out);
  bool ReadInt(int64_t& out);
  // A 64-bit integer of either sign, reinterpreted as u64 (two's complement), as
  // engines' signed and unsigned block hashes are normalised.
  bool ReadInt64Bits(uint64_t& out);
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
  bool ReadAnyInt(bool& negative, uint64_t& value);
  bool SkipDepth(int depth);
  bool ReadContainerHeader(bool is_map, uint32_t& count);

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace infera::events
