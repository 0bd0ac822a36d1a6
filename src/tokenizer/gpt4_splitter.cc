#include "tokenizer/gpt4_splitter.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

constexpr char kQwenPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum Class : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3, kCrLf = 4 };

// Class of every code point, decided by the same Regex classes the PCRE2 path uses
// (so both paths agree by construction) the first time the code point is seen, then
// remembered. Entries are atomics: concurrent first uses store the same value.
class ClassTable {
 public:
  ClassTable() : classes_(new std::atomic<uint8_t>[0x110000]) {
    letter_ = std::move(*Regex::Compile(R"(\p{L})"));
    number_ = std::move(*Regex::Compile(R"(\p{N})"));
    space_ = std::move(*Regex::Compile(R"(\s)"));
    for (char32_t c = 0; c < 0x110000; ++c) classes_[c].store(kUnknown, std::memory_order_relaxed);
    for (char32_t c = 0; c < 0x80; ++c) classes_[c].store(Classify(c), std::memory_order_relaxed);
  }
  Class Of(char32_t c) const {
    uint8_t v = classes_[c].load(std::memory_order_relaxed);
    if (v == kUnknown) {
      v = Classify(c);
      classes_[c].store(v, std::memory_order_relaxed);
    }
    return static_cast<Class>(v);
  }

 private:
  static constexpr uint8_t kUnknown = 0xFF;
  uint8_t Classify(char32_t c) const {
    if (c == '\r' || c == '\n') return kCrLf;
    std::string s;
    unicode::AppendUtf8(c, &s);
    auto whole = [&](const Regex& re) {
      std::vector<std::pair<size_t, size_t>> m;
      re.FindAll(s, &m);
      return !m.empty() && m[0].first == 0 && m[0].second == s.size();
    };
    if (whole(*space_)) return kSpace;
    if (whole(*letter_)) return kLetter;
    if (whole(*number_)) return kNumber;
    return kOther;
  }
  std::unique_ptr<std::atomic<uint8_t>[]> classes_;
  std::unique_ptr<Regex> letter_, number_, space_;
};

const ClassTable& Classes() {
  static const ClassTable* table = new ClassTable();
  return *table;
}

struct Cursor {
  std::string_view text;
  const ClassTable& table;
  // Class and end of the character at byte i (REQUIRES i < size).
  Class ClassAt(size_t i, size_t* next) const {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      *next = i + 1;
      return table.Of(c);
    }
    size_t j = i;
    char32_t cp = unicode::DecodeAt(text, &j);
    *next = j;
    return table.Of(cp);
  }
  bool IsSpace(Class c) const { return c == kSpace || c == kCrLf; }
};

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

// Length of a contraction ('s 't 're 've 'm 'll 'd, case-insensitive) at i. The only
// non-ASCII character whose case folding is one of those letters is U+017F LATIN
// SMALL LETTER LONG S (folds to s); both Oniguruma and PCRE2 match it.
size_t Contraction(std::string_view t, size_t i) {
  if (t[i] != '\'' || i + 1 >= t.size()) return 0;
  if (t.substr(i + 1, 2) == "\xC5\xBF") return 3;
  char a = Lower(t[i + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= t.size()) return 0;
  char b = Lower(t[i + 2]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

std::unique_ptr<Gpt4Splitter> Gpt4Splitter::ForPattern(std::string_view pattern) {
  int max_digits = pattern == kQwenPattern ? 1 : pattern == kLlama3Pattern ? 3 : 0;
  if (max_digits == 0) return nullptr;
  Classes();  // build the table at load time, not on the first request
  return std::unique_ptr<Gpt4Splitter>(new Gpt4Splitter(max_digits));
}

void Gpt4Splitter::FindAll(std::string_view text,
                           std::vector<std::pair<size_t, size_t>>* out) const {
  const Cursor cur{text, Classes()};
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    size_t after_c;
    Class c = cur.ClassAt(i, &after_c);
    // 1. Contractions.
    if (size_t len = Contraction(text, i)) {
      out->emplace_back(i, i + len);
      i += len;
      continue;
    }
    // 2. [^\r\n\p{L}\p{N}]?\p{L}+
    {
      size_t start_letters = c == kLetter ? i : std::string_view::npos;
      if (c != kLetter && c != kNumber && c != kCrLf && after_c < n) {
        size_t after_next;
        if (cur.ClassAt(after_c, &after_next) == kLetter) start_letters = after_c;
      }
      if (start_letters != std::string_view::npos) {
        size_t j = start_letters;
        while (j < n) {
          size_t next;
          if (cur.ClassAt(j, &next) != kLetter) break;
          j = next;
        }
        out->emplace_back(i, j);
        i = j;
        continue;
      }
    }
    // 3. \p{N}{1,K}
    if (c == kNumber) {
      size_t j = after_c;
      for (int k = 1; k < max_digits_ && j < n; ++k) {
        size_t next;
        if (cur.ClassAt(j, &next) != kNumber) break;
        j = next;
      }
      out->emplace_back(i, j);
      i = j;
      continue;
    }
    // 4. " ?[^\s\p{L}\p{N}]+[\r\n]*"
    {
      size_t start_other = c == kOther ? i : std::string_view::npos;
      if (text[i] == ' ' && after_c < n) {
        size_t after_next;
        if (cur.ClassAt(after_c, &after_next) == kOther) start_other = after_c;
      }
      if (start_other != std::string_view::npos) {
        size_t j = start_other;
        while (j < n) {
          size_t next;
          if (cur.ClassAt(j, &next) != kOther) break;
          j = next;
        }
        while (j < n && (text[j] == '\r' || text[j] == '\n')) ++j;
        out->emplace_back(i, j);
        i = j;
        continue;
      }
    }
    // 5-7. c is whitespace: the run [i, j), its last CR/LF, its last character.
    size_t j = i, last_crlf_end = std::string_view::npos, last_char = i;
    size_t chars = 0;
    while (j < n) {
      size_t next;
      Class k = cur.ClassAt(j, &next);
      if (!cur.IsSpace(k)) break;
      if (k == kCrLf) last_crlf_end = next;
      last_char = j;
      ++chars;
      j = next;
    }
    if (last_crlf_end != std::string_view::npos) {
      out->emplace_back(i, last_crlf_end);  // \s*[\r\n]+
      i = last_crlf_end;
    } else if (j == n || chars < 2) {
      out->emplace_back(i, j);  // \s+(?!\S) at the end, or \s+
      i = j;
    } else {
      out->emplace_back(i, last_char);  // \s+(?!\S): all but the last whitespace
      i = last_char;
    }
  }
}

}  // namespace infera::tokenizer
