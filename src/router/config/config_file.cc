#include "router/config/config_file.h"

#include <iterator>
#include <map>

#include "tokenizer/unicode.h"

namespace infera::router {
namespace {

// A cursor over the document that knows its line.
class TomlReader {
 public:
  explicit TomlReader(std::string_view text) : text_(text) {}

  absl::StatusOr<std::vector<TomlSetting>> Parse() {
    std::vector<TomlSetting> out;
    std::map<std::string, int> seen;
    while (true) {
      SkipBlankAndComments(/*newlines=*/true);
      if (AtEnd()) return out;
      if (Peek() == '[') {
        return Error(
            "tables ([name]) are not used: every key is a flag's long name at the top level");
      }
      TomlSetting s;
      s.line = line_;
      absl::StatusOr<std::string> key = Key();
      if (!key.ok()) return key.status();
      s.key = *key;
      SkipSpaces();
      if (Peek() == '.') return Error("dotted keys are not used: '" + s.key + "' ends at '.'");
      if (Peek() != '=') return Error("expected '=' after the key '" + s.key + "'");
      ++pos_;
      SkipSpaces();
      if (Peek() == '[') {
        ++pos_;
        s.array = true;
        while (true) {
          SkipBlankAndComments(/*newlines=*/true);
          if (AtEnd()) return Error("the array of '" + s.key + "' is not closed with ']'");
          if (Peek() == ']') {
            ++pos_;
            break;
          }
          absl::StatusOr<std::string> v = Scalar(s.key);
          if (!v.ok()) return v.status();
          s.values.push_back(*std::move(v));
          SkipBlankAndComments(/*newlines=*/true);
          if (AtEnd()) return Error("the array of '" + s.key + "' is not closed with ']'");
          if (Peek() == ',') {
            ++pos_;
          } else if (Peek() != ']') {
            return Error("expected ',' or ']' in the array of '" + s.key + "'");
          }
        }
        if (s.values.empty()) {
          return Error("'" + s.key + "' is an empty array: leave the key out instead");
        }
      } else {
        absl::StatusOr<std::string> v = Scalar(s.key);
        if (!v.ok()) return v.status();
        s.values.push_back(*std::move(v));
      }
      SkipSpaces();
      if (!AtEnd() && Peek() == '#') SkipComment();
      if (!AtEnd() && Peek() != '\n' && !(Peek() == '\r' && Next() == '\n')) {
        return Error("unexpected text after the value of '" + s.key + "'");
      }
      if (auto [it, fresh] = seen.emplace(s.key, s.line); !fresh) {
        return absl::InvalidArgumentError("line " + std::to_string(s.line) + ": '" + s.key +
                                          "' is set twice (first on line " +
                                          std::to_string(it->second) + ")");
      }
      out.push_back(std::move(s));
    }
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  char Next() const { return pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0'; }
  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError("line " + std::to_string(line_) + ": " + message);
  }

  void SkipSpaces() {
    while (Peek() == ' ' || Peek() == '\t') ++pos_;
  }
  void SkipComment() {
    while (!AtEnd() && Peek() != '\n') ++pos_;
  }
  void SkipBlankAndComments(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || (newlines && c == '\r' && Next() == '\n')) {
        ++pos_;
      } else if (newlines && c == '\n') {
        ++pos_;
        ++line_;
      } else if (c == '#') {
        SkipComment();
      } else {
        return;
      }
    }
  }

  static bool IsBareKeyChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  absl::StatusOr<std::string> Key() {
    if (Peek() == '"' || Peek() == '\'') return String("a quoted key");
    const size_t start = pos_;
    while (IsBareKeyChar(Peek())) ++pos_;
    if (pos_ == start) {
      return Error("expected a key (a flag's long name without \"--\"), found '" +
                   std::string(1, Peek()) + "'");
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  // A string, number or boolean; arrays are handled by the caller (no nesting).
  absl::StatusOr<std::string> Scalar(const std::string& key) {
    const char c = Peek();
    if (c == '"' || c == '\'') return String("the value of '" + key + "'");
    if (c == '[') return Error("'" + key + "': arrays inside arrays are not used");
    if (c == '{') return Error("'" + key + "': inline tables are not used");
    // A bare token up to a delimiter: a boolean or a number.
    const size_t start = pos_;
    while (!AtEnd() && Peek() != ' ' && Peek() != '\t' && Peek() != '\n' && Peek() != '\r' &&
           Peek() != ',' && Peek() != ']' && Peek() != '#') {
      ++pos_;
    }
    const std::string token(text_.substr(start, pos_ - start));
    if (token == "true" || token == "false") return token;
    if (std::string number; Number(token, number)) return number;
    pos_ = start;
    return Error("the value of '" + key + "' is not a TOML string, number or boolean" +
                 (token.empty()
                      ? std::string(" (it is empty)")
                      : ": '" + token + "' (strings are quoted: " + key + " = \"" + token + "\")"));
  }

  // TOML's decimal integer and float (underscores between digits, no leading zeros),
  // and inf / nan; `out` is the text CLI11 converts (underscores dropped).
  static bool Number(std::string_view t, std::string& out) {
    out.clear();
    size_t i = 0;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) out.push_back(t[i++]);
    const std::string_view rest = t.substr(i);
    if (rest == "inf" || rest == "nan") {
      out.append(rest);
      return true;
    }
    auto digits = [&](bool no_leading_zero) {
      const size_t begin = i;
      while (i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '_')) {
        if (t[i] == '_' && (i == begin || i + 1 >= t.size() || t[i + 1] < '0' || t[i + 1] > '9' ||
                            t[i - 1] == '_')) {
          return false;
        }
        if (t[i] != '_') out.push_back(t[i]);
        ++i;
      }
      if (i == begin) return false;
      return !(no_leading_zero && t[begin] == '0' && i - begin > 1);
    };
    if (!digits(true)) return false;
    if (i < t.size() && t[i] == '.') {
      out.push_back(t[i++]);
      if (!digits(false)) return false;
    }
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
      out.push_back(t[i++]);
      if (i < t.size() && (t[i] == '+' || t[i] == '-')) out.push_back(t[i++]);
      if (!digits(false)) return false;
    }
    return i == t.size();
  }

  // A basic ("...", with escapes) or literal ('...') single-line string.
  absl::StatusOr<std::string> String(const std::string& what) {
    const char quote = Peek();
    if (text_.substr(pos_, 3) == std::string(3, quote)) {
      return Error(what + ": multi-line strings are not used");
    }
    ++pos_;
    std::string out;
    while (true) {
      if (AtEnd() || Peek() == '\n' || Peek() == '\r') {
        return Error(what + ": the string is not closed with " + std::string(1, quote));
      }
      const char c = text_[pos_++];
      if (c == quote) return out;
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
        return Error(what + ": a control character inside the string");
      }
      if (c != '\\' || quote == '\'') {
        out.push_back(c);
        continue;
      }
      const char e = Peek();
      ++pos_;
      switch (e) {
        case 'b':
          out.push_back('\b');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case 'u':
        case 'U': {
          const size_t n = e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = Peek();
            const int d = h >= '0' && h <= '9'   ? h - '0'
                          : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                 : -1;
            if (d < 0)
              return Error(what + ": \\" + std::string(1, e) + " needs " + std::to_string(n) +
                           " hex digits");
            cp = cp * 16 + static_cast<uint32_t>(d);
            ++pos_;
          }
          if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            return Error(what + ": \\" + std::string(1, e) + " is not a Unicode scalar value");
          }
          tokenizer::unicode::AppendUtf8(static_cast<char32_t>(cp), &out);
          break;
        }
        default:
          return Error(what + ": invalid escape \\" + std::string(1, e));
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

absl::StatusOr<std::vector<TomlSetting>> ParseFlatToml(std::string_view text) {
  return TomlReader(text).Parse();
}

std::vector<CLI::ConfigItem> StrictTomlConfig::from_config(std::istream& input) const {
  const std::string text(std::istreambuf_iterator<char>(input), {});
  absl::StatusOr<std::vector<TomlSetting>> settings = ParseFlatToml(text);
  if (!settings.ok()) throw CLI::ConfigError(std::string(settings.status().message()));
  std::vector<CLI::ConfigItem> items;
  for (TomlSetting& s : *settings) {
    const CLI::Option* option = app_.get_option_no_throw("--" + s.key);
    if (option == nullptr || s.key.empty() || s.key[0] == '-') {
      throw CLI::ConfigError("line " + std::to_string(s.line) + ": unknown key '" + s.key +
                             "': infera-router has no flag --" + s.key +
                             " (`infera-router --help` lists them)");
    }
    if (s.array && option->get_items_expected_max() <= 1 && !option->get_allow_extra_args()) {
      throw CLI::ConfigError("line " + std::to_string(s.line) + ": '" + s.key +
                             "' takes one value, not an array");
    }
    CLI::ConfigItem item;
    item.name = std::move(s.key);
    item.inputs = std::move(s.values);
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace infera::router
