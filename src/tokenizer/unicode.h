// Unicode helpers for the tokenizer: UTF-8 decoding, lossy repair of invalid UTF-8,
// and the character classes Hugging Face tokenizers (Rust `char`) uses.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace infera::tokenizer::unicode {

// Length of the valid UTF-8 prefix of `text` (== text.size() when all valid).
size_t ValidUtf8Prefix(std::string_view text);

// Appends `text` to *out with every maximal invalid UTF-8 subpart replaced by U+FFFD
// (Unicode's "substitution of maximal subparts", as Rust's String::from_utf8_lossy and
// the WHATWG decoder do).
void AppendRepairedUtf8(std::string_view text, std::string* out);

// Decodes the code point at text[*pos] and advances *pos.
// REQUIRES: text is valid UTF-8 and *pos < text.size() is at a character start.
inline char32_t DecodeAt(std::string_view text, size_t* pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = *pos;
  unsigned char c = s[i];
  if (c < 0x80) {
    *pos = i + 1;
    return c;
  }
  if (c < 0xE0) {
    *pos = i + 2;
    return ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
  }
  if (c < 0xF0) {
    *pos = i + 3;
    return ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
  }
  *pos = i + 4;
  return ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) |
         (s[i + 3] & 0x3F);
}

// Byte offset of the start of the last character of non-empty valid UTF-8 `text`.
size_t LastCharStart(std::string_view text);

void AppendUtf8(char32_t c, std::string* out);

// Rust char::is_whitespace (Unicode White_Space).
bool IsWhitespace(char32_t c);
// Rust char::is_alphanumeric (approximated with general categories L*, N*).
bool IsAlphanumeric(char32_t c);
// Rust char::is_ascii_punctuation || general category P*.
bool IsPunctuation(char32_t c);
// Onig \w: general categories L*, M*, Nd, Pc.
bool IsWordChar(char32_t c);

}  // namespace infera::tokenizer::unicode
