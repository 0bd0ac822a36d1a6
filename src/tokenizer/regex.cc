#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace infera::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

namespace {

// Per-thread matching state shared by all patterns: match data sized for the whole
// match only, a JIT stack large enough for long whitespace runs, limits for the
// interpreter.
struct ThreadState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    if (stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
    pcre2_set_match_limit(context, 50'000'000);
    pcre2_set_heap_limit(context, 256 * 1024);  // KiB
  }
  ~ThreadState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    if (stack != nullptr) pcre2_jit_stack_free(stack);
  }
};

ThreadState& State() {
  thread_local ThreadState state;
  return state;
}

// Oniguruma's \s (what Hugging Face's regexes mean) is U+0009-U+000D, U+0085 and the
// Unicode separators (Z*); PCRE2's UCP \s differs on some code points (e.g. U+180E).
constexpr char kSpaceItems[] =
    "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// Code points that are \p{L} / \p{N} for the reference (Oniguruma in Hugging Face
// tokenizers 0.22, Unicode 16) but not for Debian's PCRE2 10.42 (Unicode 14). Found
// by probing both engines over every code point (doc/tokenizer.md); PCRE2 has no
// letter or number the reference lacks.
constexpr char kExtraL[] =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}"
    "\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}"
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}"
    "\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}"
    "\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}"
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}"
    "\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr char kExtraN[] =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}"
    "\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}"
    "\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}"
    "\\x{1E5F1}-\\x{1E5FA}";

// Rewrites \s, \S, \p{L}, \p{N} (and \P{L}, \P{N} outside classes) so PCRE2
// matches what Oniguruma matches.
std::string RewriteClasses(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  auto add = [&](std::string_view items, bool negate) {
    if (in_class) {
      out.append(items);
    } else {
      out.append(negate ? "[^" : "[").append(items).append("]");
    }
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[i + 1];
      std::string_view rest = pattern.substr(i + 1);
      if (e == 's' || (e == 'S' && !in_class)) {
        add(kSpaceItems, e == 'S');
        ++i;
        continue;
      }
      bool upper = rest.substr(0, 4) == "P{L}" || rest.substr(0, 4) == "P{N}";
      if (rest.substr(0, 4) == "p{L}" || rest.substr(0, 4) == "p{N}" || (upper && !in_class)) {
        bool letter = rest[2] == 'L';
        std::string items =
            letter ? std::string("\\p{L}") + kExtraL : std::string("\\p{N}") + kExtraN;
        add(items, upper);
        i += 4;
        continue;
      }
      out.push_back(c);
      out.push_back(e);
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') {
        out.push_back(']');
        ++i;
      }
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

Regex::~Regex() = default;

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view onig_pattern) {
  std::string pattern = RewriteClasses(onig_pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("bad regex '", std::string(onig_pattern),
                                                   "' at ", offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  std::unique_ptr<Regex> regex(new Regex());
  regex->code_ = std::make_unique<Code>();
  regex->code_->code = code;
  regex->code_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return regex;
}

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  ThreadState& state = State();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t n = text.size();
  size_t pos = 0;
  while (pos <= n) {
    int rc;
    if (code_->jit) {
      rc = pcre2_jit_match(code_->code, subject, n, pos, 0, state.data, state.context);
    } else {
      rc = pcre2_match(code_->code, subject, n, pos, PCRE2_NO_UTF_CHECK, state.data, state.context);
    }
    if (rc < 0) {
      if (rc != PCRE2_ERROR_NOMATCH && code_->jit) {
        // JIT resource limit: retry this position with the interpreter.
        rc = pcre2_match(code_->code, subject, n, pos, PCRE2_NO_UTF_CHECK, state.data,
                         state.context);
      }
      if (rc < 0) return;
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    size_t s = ov[0], e = ov[1];
    if (e < s) return;  // \K tricks; not used by tokenizer patterns
    out->emplace_back(s, e);
    if (e == s) {
      if (e >= n) return;
      // Advance one character past an empty match.
      pos = e + 1;
      while (pos < n && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    } else {
      pos = e;
    }
  }
}

}  // namespace infera::tokenizer
