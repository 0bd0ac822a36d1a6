#include "event_wire/nats_subject.h"

#include <charconv>
#include <cstdint>

namespace infera::events {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

}  // namespace

std::string Base64UrlEncode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char b : bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 63]);
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view text) {
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = Value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if ((acc & ((1u << bits) - 1)) != 0) return std::nullopt;  // non-canonical trailing bits
  return out;
}

std::string KvEventSubject(const core::TargetKey& key) {
  return std::string(kNatsSubjectPrefix) + Base64UrlEncode(key.worker_id) + "." +
         std::to_string(key.dp_rank);
}

std::optional<core::TargetKey> ParseKvEventSubject(std::string_view subject) {
  if (!subject.starts_with(kNatsSubjectPrefix)) return std::nullopt;
  subject.remove_prefix(kNatsSubjectPrefix.size());
  const size_t dot = subject.find('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  std::optional<std::string> id = Base64UrlDecode(subject.substr(0, dot));
  const std::string_view rank = subject.substr(dot + 1);
  uint32_t r = 0;
  auto [end, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), r);
  if (!id || id->empty() || rank.empty() || ec != std::errc() || end != rank.data() + rank.size()) {
    return std::nullopt;
  }
  return core::TargetKey{*std::move(id), r};
}

}  // namespace infera::events
