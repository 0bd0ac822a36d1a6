#include "template/py_string.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace infera::jinja::py {
namespace {

// Decodes one code point at s[i], advancing i; invalid bytes yield U+FFFD.
char32_t DecodeOne(std::string_view s, size_t& i) {
  utf8proc_int32_t cp = 0;
  utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                        static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  if (n <= 0) {
    ++i;
    return 0xFFFD;
  }
  i += static_cast<size_t>(n);
  return static_cast<char32_t>(cp);
}

bool InSet(char32_t cp, const std::vector<char32_t>& set) {
  for (char32_t c : set) {
    if (c == cp) return true;
  }
  return false;
}

bool IsCased(char32_t cp) {
  auto c = static_cast<utf8proc_int32_t>(cp);
  return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c || utf8proc_totitle(c) != c;
}

bool IsPrintable(char32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

template <typename F>
std::string MapCodePoints(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(f(static_cast<char32_t>(c))));
      ++i;
      continue;
    }
    AppendUtf8(f(DecodeOne(s, i)), out);
  }
  return out;
}

}  // namespace

std::vector<char32_t> Decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) out.push_back(DecodeOne(s, i));
  return out;
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Encode(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) AppendUtf8(cps[i], out);
  return out;
}

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

size_t CodePointCount(std::string_view s) {
  if (IsAscii(s)) return s.size();
  size_t n = 0;
  size_t i = 0;
  while (i < s.size()) {
    DecodeOne(s, i);
    ++n;
  }
  return n;
}

bool IsSpace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string Strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> cps = Decode(s);
  std::vector<char32_t> set;
  if (chars != nullptr) set = Decode(*chars);
  auto strip_it = [&](char32_t cp) { return chars == nullptr ? IsSpace(cp) : InSet(cp, set); };
  size_t begin = 0;
  size_t end = cps.size();
  if (left) {
    while (begin < end && strip_it(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(cps[end - 1])) --end;
  }
  if (begin == 0 && end == cps.size()) return std::string(s);
  return Encode(cps, begin, end);
}

std::vector<std::string> SplitWhitespace(std::string_view s, int64_t max_split) {
  std::vector<char32_t> cps = Decode(s);
  std::vector<std::string> out;
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsSpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split) {
      size_t end = cps.size();
      while (end > i && IsSpace(cps[end - 1])) --end;
      out.push_back(Encode(cps, i, end));
      return out;
    }
    size_t start = i;
    while (i < cps.size() && !IsSpace(cps[i])) ++i;
    out.push_back(Encode(cps, start, i));
  }
  return out;
}

std::vector<std::string> Split(std::string_view s, std::string_view sep, int64_t max_split) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (max_split < 0 || static_cast<int64_t>(out.size()) < max_split) {
    size_t hit = s.find(sep, pos);
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::vector<std::string> RSplit(std::string_view s, std::string_view sep, int64_t max_split) {
  std::vector<std::string> out;
  size_t end = s.size();
  while (max_split < 0 || static_cast<int64_t>(out.size()) < max_split) {
    if (end < sep.size()) break;
    size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(hit + sep.size(), end - hit - sep.size()));
    end = hit;
  }
  out.emplace_back(s.substr(0, end));
  return std::vector<std::string>(out.rbegin(), out.rend());
}

std::string Replace(std::string_view s, std::string_view old_part, std::string_view new_part,
                    int64_t count) {
  std::string out;
  if (old_part.empty()) {
    // Python inserts new_part before every code point and at the end.
    std::vector<char32_t> cps = Decode(s);
    int64_t done = 0;
    for (char32_t cp : cps) {
      if (count < 0 || done < count) {
        out.append(new_part);
        ++done;
      }
      AppendUtf8(cp, out);
    }
    if (count < 0 || done < count) out.append(new_part);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old_part, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_part);
    pos = hit + old_part.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::string Upper(std::string_view s) {
  if (IsAscii(s)) {
    std::string out(s);
    for (char& c : out) {
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    return out;
  }
  // Full case mappings CPython applies that utf8proc's simple mapping lacks.
  std::string out;
  for (char32_t c : Decode(s)) {
    switch (c) {
      case 0x00DF:
        out += "SS";
        continue;
      case 0xFB00:
        out += "FF";
        continue;
      case 0xFB01:
        out += "FI";
        continue;
      case 0xFB02:
        out += "FL";
        continue;
      case 0xFB03:
        out += "FFI";
        continue;
      case 0xFB04:
        out += "FFL";
        continue;
      case 0xFB05:
      case 0xFB06:
        out += "ST";
        continue;
      case 0x0149:
        out += "\u02BCN";
        continue;
      default:
        AppendUtf8(static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))), out);
    }
  }
  return out;
}

std::string Lower(std::string_view s) {
  if (IsAscii(s)) {
    std::string out(s);
    for (char& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  std::vector<char32_t> cps = Decode(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    char32_t c = cps[i];
    if (c == 0x0130) {  // İ → i + combining dot above
      out += "i\u0307";
      continue;
    }
    if (c == 0x03A3) {  // Final sigma: after a cased letter, not before one.
      bool after_cased = i > 0 && IsCased(cps[i - 1]);
      bool before_cased = i + 1 < cps.size() && IsCased(cps[i + 1]);
      out += (after_cased && !before_cased) ? "\u03C2" : "\u03C3";
      continue;
    }
    AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))), out);
  }
  return out;
}

std::string Title(std::string_view s) {
  bool previous_cased = false;
  return MapCodePoints(s, [&](char32_t c) {
    auto cp = static_cast<utf8proc_int32_t>(c);
    char32_t mapped =
        static_cast<char32_t>(previous_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp));
    previous_cased = IsCased(c);
    return mapped;
  });
}

std::string Capitalize(std::string_view s) {
  bool first = true;
  return MapCodePoints(s, [&](char32_t c) {
    auto cp = static_cast<utf8proc_int32_t>(c);
    char32_t mapped = static_cast<char32_t>(first ? utf8proc_totitle(cp) : utf8proc_tolower(cp));
    first = false;
    return mapped;
  });
}

std::string ReprString(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = DecodeOne(s, i);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (!IsPrintable(cp)) {
      char buf[16];
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      AppendUtf8(cp, out);
    }
  }
  out.push_back(quote);
  return out;
}

std::string ReprFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci = [-]d[.ddd]e[+-]XX
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  int exponent = std::atoi(sci.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exponent + 1;
  std::string out = negative ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  exponent < 0 ? -exponent : exponent);
    out += exp_buf;
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
           digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      char32_t cp = DecodeOne(s, i);
      if (!ensure_ascii) {
        AppendUtf8(cp, out);
        continue;
      }
      char buf[16];
      if (cp >= 0x10000) {
        char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                      static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

}  // namespace infera::jinja::py
