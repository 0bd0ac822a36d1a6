// Headers: an ordered list of HTTP header fields with case-insensitive lookup.
//
// Plain value type; not thread-safe (copy it across threads).
#pragma once

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
      out.append(f.name).append(": ").append(f.value).append("\r\n");
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
  static bool WireSafe(std::string_view s) {
    for (char c : s) {
      if (c == '\r' || c == '\n' || c == '\0') return false;
    }
    return true;
  }

  std::vector<Field> fields_;
};

}  // namespace infera::http
