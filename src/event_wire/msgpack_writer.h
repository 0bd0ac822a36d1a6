// MsgpackWriter: a minimal msgpack encoder appending to a std::string, always the
// smallest encoding (as msgspec and msgpack-python do). Used by the KV event encoder
// and the router replicas' load messages.
//
// Thread-safety: a plain value over the caller's string.
//
// Example:
//   std::string out;
//   MsgpackWriter w(out);
//   w.Map(1);
//   w.Str("v");
//   w.Uint(1);
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infera::events {

class MsgpackWriter {
 public:
  explicit MsgpackWriter(std::string& out) : out_(out) {}

  void Nil() { Byte(0xc0); }
  void Uint(uint64_t v) {
    if (v <= 0x7f) {
      Byte(static_cast<uint8_t>(v));
    } else if (v <= 0xff) {
      Byte(0xcc);
      BE(v, 1);
    } else if (v <= 0xffff) {
      Byte(0xcd);
      BE(v, 2);
    } else if (v <= 0xffffffffu) {
      Byte(0xce);
      BE(v, 4);
    } else {
      Byte(0xcf);
      BE(v, 8);
    }
  }
  void Int(int64_t v) {
    if (v >= 0) return Uint(static_cast<uint64_t>(v));
    if (v >= -32) return Byte(static_cast<uint8_t>(v));
    const uint64_t bits = static_cast<uint64_t>(v);
    if (v >= INT8_MIN) {
      Byte(0xd0);
      BE(bits, 1);
    } else if (v >= INT16_MIN) {
      Byte(0xd1);
      BE(bits, 2);
    } else if (v >= INT32_MIN) {
      Byte(0xd2);
      BE(bits, 4);
    } else {
      Byte(0xd3);
      BE(bits, 8);
    }
  }
  void Double(double d) {
    Byte(0xcb);
    BE(std::bit_cast<uint64_t>(d), 8);
  }
  void Str(std::string_view s) {
    const size_t n = s.size();
    if (n <= 31) {
      Byte(static_cast<uint8_t>(0xa0 | n));
    } else if (n <= 0xff) {
      Byte(0xd9);
      BE(n, 1);
    } else if (n <= 0xffff) {
      Byte(0xda);
      BE(n, 2);
    } else {
      Byte(0xdb);
      BE(n, 4);
    }
    out_.append(s);
  }
  void Array(size_t n) { Header(n, 0x90, 0xdc, 0xdd); }
  void Map(size_t n) { Header(n, 0x80, 0xde, 0xdf); }
  void OptStr(const std::optional<std::string>& s) { s ? Str(*s) : Nil(); }
  void Hashes(const std::vector<uint64_t>& hashes) {
    Array(hashes.size());
    for (uint64_t h : hashes) Uint(h);
  }
  void Tokens(const std::vector<uint32_t>& tokens) {
    Array(tokens.size());
    for (uint32_t t : tokens) Uint(t);
  }

 private:
  void Byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  void BE(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Header(size_t n, uint8_t fix, uint8_t b16, uint8_t b32) {
    if (n <= 15) {
      Byte(static_cast<uint8_t>(fix | n));
    } else if (n <= 0xffff) {
      Byte(b16);
      BE(n, 2);
    } else {
      Byte(b32);
      BE(n, 4);
    }
  }

  std::string& out_;
};

}  // namespace infera::events
