// Cat(): string concatenation for error messages.
//
// Debian's abseil is built with its own absl::string_view (not std::string_view),
// so absl::StrCat does not accept std::string_view; this small helper accepts
// both, strings and integers. Pure; thread-safe.
#pragma once

#include <concepts>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace infera::discovery::internal {

inline void AppendPiece(std::string& out, std::string_view piece) { out.append(piece); }
inline void AppendPiece(std::string& out, const char* piece) { out.append(piece); }
inline void AppendPiece(std::string& out, const std::string& piece) { out.append(piece); }
inline void AppendPiece(std::string& out, absl::string_view piece) {
  out.append(piece.data(), piece.size());
}
inline void AppendPiece(std::string& out, std::integral auto value) {
  out.append(std::to_string(value));
}

template <typename... Pieces>
std::string Cat(const Pieces&... pieces) {
  std::string out;
  (AppendPiece(out, pieces), ...);
  return out;
}

// The message of a status as a std::string.
template <typename S>
std::string MessageOf(const S& status) {
  return std::string(status.message().data(), status.message().size());
}

}  // namespace infera::discovery::internal
