// Headers: an ordered list of HTTP header fields with case-insensitive lookup.
//
// Plain value type; not thread-safe (copy it across threads).
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace infera::http {

class Headers {
 public:
  struct Field {
    std::string name;
    std::string value;
  };

  Headers() = default;
  Headers(std::initializer_list<Field> fields) : fields_(fields) {}

  // First value of `name` (case-insensitive), or "" when absent.
  std::string_view Get(std::string_view name) const {
    for (const Field& f : fields_) {
      if (EqualsIgnoreCase(f.name, name)) return f.value;
    }
    return {};
  }
  bool Has(std::string_view name) const {
    for (const Field& f : fields_) {
      if (EqualsIgnoreCase(f.name, name)) return true;
    }
    return false;
  }
  void Add(std::string name, std::string value) {
    if (fields_.capacity() == 0) fields_.reserve(8);  // no regrowth for a usual message
    fields_.push_back({std::move(name), std::move(value)});
  }
  // Replaces every field called `name` with one field.
  void Set(std::string name, std::string value) {
    Remove(name);
    Add(std::move(name), std::move(value));
  }
  void Remove(std::string_view name) {
    std::erase_if(fields_, [&](const Field& f) { return EqualsIgnoreCase(f.name, name); });
  }
  const std::vector<Field>& fields() const { return fields_; }
  void Reserve(size_t n) { fields_.reserve(n); }

  // Appends "Name: value\r\n" per field (the HTTP/1.1 wire form). A field whose
  // name or value holds CR, LF or NUL is dropped: it could split the message.
  void AppendWire(std::string& out) const {
    for (const Field& f : fields_) {
      if (!IsWireSafe(f)) continue;
      AppendField(out, f);
    }
  }
  // AppendWire without the fields named in `skip` (case-insensitive): the ones a
  // writer sets itself (Content-Length, Connection, ...). One pass, nothing erased.
  void AppendWireExcept(std::string& out, std::initializer_list<std::string_view> skip) const {
    for (const Field& f : fields_) {
      if (!IsWireSafe(f)) continue;
      bool skipped = false;
      for (std::string_view name : skip) {
        if (EqualsIgnoreCase(f.name, name)) {
          skipped = true;
          break;
        }
      }
      if (!skipped) AppendField(out, f);
    }
  }

  // False for a field that could split the message: an empty name, or CR, LF or NUL
  // in its name or value.
  static bool IsWireSafe(const Field& f) {
    return !f.name.empty() && WireSafe(f.name) && WireSafe(f.value);
  }

  static bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      char x = a[i], y = b[i];
      if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
      if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
      if (x != y) return false;
    }
    return true;
  }

 private:
  // Eight bytes at a time: a word holds CR, LF or NUL when w ^ CR.., w ^ LF.. or w
  // itself holds a zero byte.
  static bool WireSafe(std::string_view s) {
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (HasZeroByte(w) || HasZeroByte(w ^ 0x0d0d0d0d0d0d0d0dull) ||
          HasZeroByte(w ^ 0x0a0a0a0a0a0a0a0aull)) {
        return false;
      }
    }
    for (; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '\r' || c == '\n' || c == '\0') return false;
    }
    return true;
  }
  // True when a byte of `w` is zero (exact: Hacker's Delight's haszero).
  static bool HasZeroByte(uint64_t w) {
    return ((w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull) != 0;
  }
  static void AppendField(std::string& out, const Field& f) {
    const size_t at = out.size();
    out.resize(at + f.name.size() + f.value.size() + 4);
    char* p = out.data() + at;
    std::memcpy(p, f.name.data(), f.name.size());
    p += f.name.size();
    *p++ = ':';
    *p++ = ' ';
    std::memcpy(p, f.value.data(), f.value.size());
    p += f.value.size();
    *p++ = '\r';
    *p = '\n';
  }

  std::vector<Field> fields_;
};

}  // namespace infera::http
