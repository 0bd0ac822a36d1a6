// Reading a simdjson DOM the way the API parsers need it (api_request, request_checks,
// prompt_scan): a key given twice counts with its last value (as Python's json keeps,
// and so the engine sees), integers of either sign are one kind, and every miss is a
// nullopt or false, never an exception.
//
// Thread-safety: pure functions over elements the caller owns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "simdjson.h"

namespace infera::router::json_fields {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// The value of `key` in `obj` (the last one if the key repeats), or nullopt.
inline std::optional<element> Field(const object& obj, std::string_view key) {
  std::optional<element> found;
  for (const simdjson::dom::key_value_pair& f : obj) {
    if (f.key == key) found = f.value;
  }
  return found;
}

// As above; nullopt when `e` is not an object.
inline std::optional<element> Field(const element& e, std::string_view key) {
  object obj;
  if (e.get_object().get(obj) != simdjson::SUCCESS) return std::nullopt;
  return Field(obj, key);
}

// The string value of `key`, or nullopt (absent, or not a string).
inline std::optional<std::string_view> StringField(const element& e, std::string_view key) {
  auto v = Field(e, key);
  std::string_view s;
  if (!v || v->get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  return s;
}

inline bool IsInteger(const element& e) {
  return e.type() == element_type::INT64 || e.type() == element_type::UINT64;
}

// Integer value clamped into int64 (UINT64 values above INT64_MAX saturate).
// REQUIRES: IsInteger(e).
inline int64_t IntegerValue(const element& e) {
  if (e.type() == element_type::UINT64) {
    uint64_t u = e.get_uint64().value_unsafe();
    return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  }
  return e.get_int64().value_unsafe();
}

inline array ArrayOf(const element& e) {
  return e.get_array().value_unsafe();
}  // REQUIRES: an array
inline object ObjectOf(const element& e) {  // REQUIRES: an object
  return e.get_object().value_unsafe();
}

// An empty array or object (false for any other type).
inline bool IsEmpty(const element& e) {
  if (e.type() == element_type::ARRAY) {
    array a = e.get_array().value_unsafe();
    return a.begin() == a.end();
  }
  if (e.type() == element_type::OBJECT) {
    object o = e.get_object().value_unsafe();
    return o.begin() == o.end();
  }
  return false;
}

// The client's error: InvalidArgument (400) with `msg`.
inline absl::Status Invalid(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

}  // namespace infera::router::json_fields
