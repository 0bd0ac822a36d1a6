#include "template/parser.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string>
#include <vector>

#include "template/py_string.h"
#include "template/template_error.h"

namespace infera::jinja {
namespace {

enum class Tok {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  Tok type;
  std::string value;
  int line;
};

[[noreturn]] void SyntaxError(int line, const std::string& message) {
  throw TemplateError(TemplateError::Kind::kSyntax,
                      "syntax error at line " + std::to_string(line) + ": " + message);
}

// Decodes one UTF-8 code point at s[i] (used for Unicode whitespace checks).
char32_t PeekCodePoint(std::string_view s, size_t i, size_t* length) {
  std::vector<char32_t> cps = py::Decode(s.substr(i, std::min<size_t>(4, s.size() - i)));
  std::string first;
  py::AppendUtf8(cps.empty() ? 0 : cps[0], first);
  *length = std::max<size_t>(1, first.size());
  return cps.empty() ? 0 : cps[0];
}

// Python str.rstrip() (Unicode whitespace).
std::string_view RStrip(std::string_view s) {
  while (!s.empty()) {
    unsigned char c = static_cast<unsigned char>(s.back());
    if (c < 0x80) {
      if (!py::IsSpace(c)) break;
      s.remove_suffix(1);
      continue;
    }
    size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    if (!py::IsSpace(PeekCodePoint(s, start, &len))) break;
    s.remove_suffix(s.size() - start);
  }
  return s;
}

// Skips Unicode whitespace from pos (the `\s*` after `-%}`).
size_t SkipSpace(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t len = 1;
    char32_t cp = static_cast<unsigned char>(s[pos]) < 0x80 ? static_cast<unsigned char>(s[pos])
                                                            : PeekCodePoint(s, pos, &len);
    if (!py::IsSpace(cp)) break;
    pos += len;
  }
  return pos;
}

bool AllSpace(std::string_view s) {
  if (s.empty()) return false;
  return SkipSpace(s, 0) == s.size();
}

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Decodes a Python string literal body with unicode-escape semantics.
std::string DecodeStringLiteral(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    auto hex = [&](size_t digits) -> char32_t {
      uint32_t v = 0;
      for (size_t k = 1; k <= digits; ++k) {
        if (i + k >= body.size()) SyntaxError(line, "truncated escape in string literal");
        char h = body[i + k];
        int d = IsDigit(h)               ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (d < 0) SyntaxError(line, "invalid escape in string literal");
        v = v * 16 + static_cast<uint32_t>(d);
      }
      i += digits;
      if (v > 0x10FFFF) SyntaxError(line, "escape out of Unicode range");
      return v;
    };
    switch (e) {
      case '\n':
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
        py::AppendUtf8(hex(2), out);
        break;
      case 'u':
        py::AppendUtf8(hex(4), out);
        break;
      case 'U':
        py::AppendUtf8(hex(8), out);
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          py::AppendUtf8(v, out);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    // Newlines normalised to "\n"; one trailing newline dropped.
    source_.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        source_.push_back('\n');
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        source_.push_back(raw[i]);
      }
    }
    if (!source_.empty() && source_.back() == '\n') source_.pop_back();
  }

  std::vector<Token> Tokenize() {
    std::string_view s = source_;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s.size()) {
      size_t tag = FindTag(s, pos);
      std::string_view text = s.substr(pos, (tag == std::string_view::npos ? s.size() : tag) - pos);
      if (tag == std::string_view::npos) {
        Emit(Tok::kData, std::string(text));
        break;
      }
      char kind = s[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < s.size() ? s[tag + 2] : '\0';
      if (sign == '-') {
        text = RStrip(text);
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && AllSpace(text.substr(l_pos)))
          text = text.substr(0, l_pos);
      }
      if (!text.empty()) Emit(Tok::kData, std::string(text));
      line_ += CountNewlines(s.substr(pos, tag - pos));
      pos = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        pos = LexCommentEnd(s, pos);
      } else if (kind == '%' && IsRawBegin(s, pos)) {
        pos = LexRaw(s, pos);
      } else {
        pos = LexTag(s, pos, kind == '%');
      }
      line_starting = pos > 0 && s[pos - 1] == '\n';
    }
    Emit(Tok::kEof, "");
    return std::move(tokens_);
  }

 private:
  static size_t FindTag(std::string_view s, size_t pos) {
    while (true) {
      size_t hit = s.find('{', pos);
      if (hit == std::string_view::npos || hit + 1 >= s.size()) return std::string_view::npos;
      char next = s[hit + 1];
      if (next == '{' || next == '%' || next == '#') return hit;
      pos = hit + 1;
    }
  }

  static int CountNewlines(std::string_view s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  }

  void Emit(Tok type, std::string value) {
    tokens_.push_back(Token{type, std::move(value), line_});
  }

  size_t LexCommentEnd(std::string_view s, size_t pos) {
    size_t end = s.find("#}", pos);
    if (end == std::string_view::npos) SyntaxError(line_, "missing end of comment tag");
    line_ += CountNewlines(s.substr(pos, end - pos));
    bool strip = end > pos && s[end - 1] == '-';
    size_t after = end + 2;
    if (strip) return SkipSpace(s, after);
    if (after < s.size() && s[after] == '\n') ++after;
    return after;
  }

  // At pos (just after "{%" and its sign): is this `raw %}`?
  static bool IsRawBegin(std::string_view s, size_t pos) {
    size_t p = SkipSpace(s, pos);
    if (s.substr(p, 3) != "raw") return false;
    p = SkipSpace(s, p + 3);
    return s.substr(p, 2) == "%}" || s.substr(p, 3) == "-%}";
  }

  size_t LexRaw(std::string_view s, size_t pos) {
    size_t p = SkipSpace(s, pos) + 3;
    p = SkipSpace(s, p);
    if (s[p] == '-') {
      p = SkipSpace(s, p + 3);
    } else {
      p += 2;
    }
    // Find "{%[-+]? endraw [-+]?%}".
    size_t search = p;
    while (true) {
      size_t open = s.find("{%", search);
      if (open == std::string_view::npos) SyntaxError(line_, "missing end of raw directive");
      size_t q = open + 2;
      char sign = q < s.size() ? s[q] : '\0';
      if (sign == '-' || sign == '+') ++q;
      q = SkipSpace(s, q);
      if (s.substr(q, 6) == "endraw") {
        size_t r = SkipSpace(s, q + 6);
        std::string_view body = s.substr(p, open - p);
        if (sign == '-') body = RStrip(body);
        size_t after;
        if (s.substr(r, 2) == "%}") {
          after = r + 2;
          if (after < s.size() && s[after] == '\n') ++after;
        } else if (s.substr(r, 3) == "-%}") {
          after = SkipSpace(s, r + 3);
        } else if (s.substr(r, 3) == "+%}") {
          after = r + 3;
        } else {
          search = open + 2;
          continue;
        }
        if (!body.empty()) Emit(Tok::kData, std::string(body));
        line_ += CountNewlines(s.substr(pos, after - pos));
        return after;
      }
      search = open + 2;
    }
  }

  // Lexes the inside of {{ ... }} or {% ... %} starting at pos; returns the position after
  // the closing delimiter (with trim_blocks / `-` handling applied).
  size_t LexTag(std::string_view s, size_t pos, bool block) {
    Emit(block ? Tok::kBlockBegin : Tok::kVarBegin, "");
    const char* close = block ? "%}" : "}}";
    int depth = 0;  // brackets: "}}" inside a dict literal's nesting is not a close.
    while (true) {
      if (pos >= s.size())
        SyntaxError(line_, block ? "unexpected end of template, expected '%}'"
                                 : "unexpected end of template, expected '}}'");
      char c = s[pos];
      if (depth == 0) {
        if (c == '-' && s.substr(pos + 1, 2) == close) {
          Emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "");
          return SkipSpace(s, pos + 3);
        }
        if (block && c == '+' && s.substr(pos + 1, 2) == close) {
          Emit(Tok::kBlockEnd, "");
          return pos + 3;
        }
        if (s.substr(pos, 2) == close) {
          Emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "");
          pos += 2;
          if (block && pos < s.size() && s[pos] == '\n') ++pos;
          return pos;
        }
      }
      if (c == '\n') {
        ++line_;
        ++pos;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
        ++pos;
        continue;
      }
      if (static_cast<unsigned char>(c) >= 0x80) {
        size_t len = 1;
        if (py::IsSpace(PeekCodePoint(s, pos, &len))) {
          pos += len;
          continue;
        }
        SyntaxError(line_, "unexpected character in expression");
      }
      if (IsNameStart(c)) {
        size_t start = pos;
        while (pos < s.size() && IsNameChar(s[pos])) ++pos;
        Emit(Tok::kName, std::string(s.substr(start, pos - start)));
        continue;
      }
      if (IsDigit(c)) {
        pos = LexNumber(s, pos);
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t start = ++pos;
        while (pos < s.size() && s[pos] != c) {
          if (s[pos] == '\\') ++pos;
          ++pos;
        }
        if (pos >= s.size()) SyntaxError(line_, "unexpected end of string literal");
        std::string_view body = s.substr(start, pos - start);
        Emit(Tok::kString, DecodeStringLiteral(body, line_));
        line_ += CountNewlines(body);
        ++pos;
        continue;
      }
      static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      bool matched = false;
      for (const char* op : kTwo) {
        if (s.substr(pos, 2) == op) {
          Emit(Tok::kOp, op);
          pos += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      static const std::string_view kOne = "+-/*%~[](){}<>=.:|,;";
      if (kOne.find(c) == std::string_view::npos) {
        SyntaxError(line_, std::string("unexpected char '") + c + "'");
      }
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      Emit(Tok::kOp, std::string(1, c));
      ++pos;
    }
  }

  size_t LexNumber(std::string_view s, size_t pos) {
    size_t start = pos;
    auto digits = [&]() {
      while (pos < s.size() &&
             (IsDigit(s[pos]) || (s[pos] == '_' && pos + 1 < s.size() && IsDigit(s[pos + 1]))))
        ++pos;
    };
    digits();
    bool is_float = false;
    if (pos + 1 < s.size() && s[pos] == '.' && IsDigit(s[pos + 1])) {
      is_float = true;
      ++pos;
      digits();
    }
    if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
      size_t p = pos + 1;
      if (p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
      if (p < s.size() && IsDigit(s[p])) {
        is_float = true;
        pos = p;
        digits();
      }
    }
    std::string text;
    for (char ch : s.substr(start, pos - start)) {
      if (ch != '_') text.push_back(ch);
    }
    Emit(is_float ? Tok::kFloat : Tok::kInt, text);
    return pos;
  }

  std::string source_;
  std::vector<Token> tokens_;
  int line_ = 1;
};

class ParserImpl {
 public:
  explicit ParserImpl(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body ParseTemplate() {
    Body body = Subparse({});
    if (Cur().type != Tok::kEof) SyntaxError(Cur().line, "unexpected tag");
    return body;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(ParserImpl* p) : parser(p) {
      if (++parser->depth_ > Parser::kMaxNesting)
        SyntaxError(parser->Cur().line, "template nested too deeply");
    }
    ~DepthGuard() { --parser->depth_; }
    ParserImpl* parser;
  };

  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(const char* op) const { return Cur().type == Tok::kOp && Cur().value == op; }
  bool IsName(const char* name) const { return Cur().type == Tok::kName && Cur().value == name; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Tok::kEof:
        return "end of template";
      case Tok::kBlockEnd:
        return "end of statement block";
      case Tok::kVarEnd:
        return "end of print statement";
      case Tok::kData:
        return "template data";
      default:
        return "'" + t.value + "'";
    }
  }
  void ExpectOp(const char* op) {
    if (!SkipOp(op))
      SyntaxError(Cur().line, std::string("expected '") + op + "', got " + Describe(Cur()));
  }
  std::string ExpectName() {
    if (Cur().type != Tok::kName)
      SyntaxError(Cur().line, "expected a name, got " + Describe(Cur()));
    std::string name = Cur().value;
    Next();
    return name;
  }
  void ExpectBlockEnd() {
    if (Cur().type != Tok::kBlockEnd)
      SyntaxError(Cur().line, "expected end of statement block, got " + Describe(Cur()));
    Next();
  }

  // Parses nodes until a block tag whose name is in end_names (left unconsumed, the
  // current token is that name) or the end of the template.
  Body Subparse(const std::vector<std::string>& end_names) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == Tok::kEof) {
        if (!end_names.empty()) {
          std::string expected;
          for (const auto& name : end_names) {
            expected += (expected.empty() ? "'" : " or '") + name + "'";
          }
          SyntaxError(t.line, "unexpected end of template, expected " + expected);
        }
        return body;
      }
      if (t.type == Tok::kData) {
        auto node = std::make_unique<Node>();
        node->type = Node::Type::kText;
        node->line = t.line;
        node->text = t.value;
        body.push_back(std::move(node));
        Next();
      } else if (t.type == Tok::kVarBegin) {
        auto node = std::make_unique<Node>();
        node->type = Node::Type::kOutput;
        node->line = t.line;
        Next();
        node->expr = ParseTuple(true, false, {});
        if (Cur().type != Tok::kVarEnd)
          SyntaxError(Cur().line, "expected end of print statement, got " + Describe(Cur()));
        Next();
        body.push_back(std::move(node));
      } else if (t.type == Tok::kBlockBegin) {
        Next();
        if (Cur().type != Tok::kName) SyntaxError(Cur().line, "tag name expected");
        for (const auto& end : end_names) {
          if (Cur().value == end) return body;
        }
        body.push_back(ParseStatement(end_names));
      } else {
        SyntaxError(t.line, "unexpected " + Describe(t));
      }
    }
  }

  NodePtr ParseStatement(const std::vector<std::string>& enclosing) {
    DepthGuard guard(this);
    const std::string tag = Cur().value;
    int line = Cur().line;
    auto node = std::make_unique<Node>();
    node->line = line;
    Next();
    if (tag == "if") {
      node->type = Node::Type::kIf;
      ExprPtr cond = ParseTuple(false, false, {});
      while (true) {
        ExpectBlockEnd();
        Body branch = Subparse({"elif", "else", "endif"});
        node->branches.emplace_back(std::move(cond), std::move(branch));
        std::string end = Cur().value;
        Next();
        if (end == "elif") {
          cond = ParseTuple(false, false, {});
          continue;
        }
        if (end == "else") {
          ExpectBlockEnd();
          node->else_body = Subparse({"endif"});
          Next();
        }
        ExpectBlockEnd();
        break;
      }
    } else if (tag == "for") {
      node->type = Node::Type::kFor;
      ParseAssignTargets(node.get(), false);
      if (!SkipName("in")) SyntaxError(Cur().line, "expected 'in', got " + Describe(Cur()));
      node->expr = ParseTuple(false, false, {"recursive"});
      if (SkipName("if")) node->condition = ParseExpression(true);
      if (SkipName("recursive")) node->recursive = true;
      ExpectBlockEnd();
      node->body = Subparse({"endfor", "else"});
      if (Cur().value == "else") {
        Next();
        ExpectBlockEnd();
        node->else_body = Subparse({"endfor"});
      }
      Next();
      ExpectBlockEnd();
    } else if (tag == "set") {
      ParseAssignTargets(node.get(), true);
      if (SkipOp("=")) {
        node->type = Node::Type::kSet;
        node->expr = ParseTuple(true, false, {});
        ExpectBlockEnd();
      } else {
        node->type = Node::Type::kSetBlock;
        if (!node->attribute.empty() || node->targets.size() != 1) {
          SyntaxError(line, "block set needs a single name");
        }
        if (IsOp("|")) node->expr = ParseFilterChain(nullptr);
        ExpectBlockEnd();
        node->body = Subparse({"endset"});
        Next();
        ExpectBlockEnd();
      }
    } else if (tag == "macro") {
      node->type = Node::Type::kMacro;
      node->text = ExpectName();
      ParseSignature(node.get());
      ExpectBlockEnd();
      node->body = Subparse({"endmacro"});
      Next();
      ExpectBlockEnd();
    } else if (tag == "call") {
      node->type = Node::Type::kCallBlock;
      if (IsOp("(")) ParseSignature(node.get());
      node->expr = ParseExpression(true);
      if (node->expr->type != Expr::Type::kCall) SyntaxError(line, "expected call");
      ExpectBlockEnd();
      node->body = Subparse({"endcall"});
      Next();
      ExpectBlockEnd();
    } else if (tag == "filter") {
      node->type = Node::Type::kFilterBlock;
      node->expr = ParseFilterChain(nullptr, /*leading_pipe=*/false);
      ExpectBlockEnd();
      node->body = Subparse({"endfilter"});
      Next();
      ExpectBlockEnd();
    } else if (tag == "break" || tag == "continue") {
      bool in_loop = false;
      for (const auto& e : enclosing) in_loop |= e == "endfor";
      (void)in_loop;
      node->type = tag == "break" ? Node::Type::kBreak : Node::Type::kContinue;
      ExpectBlockEnd();
    } else if (tag == "with") {
      node->type = Node::Type::kWith;
      while (Cur().type != Tok::kBlockEnd) {
        if (!node->targets.empty()) ExpectOp(",");
        node->targets.push_back(ExpectName());
        ExpectOp("=");
        node->values.push_back(ParseExpression(true));
      }
      ExpectBlockEnd();
      node->body = Subparse({"endwith"});
      Next();
      ExpectBlockEnd();
    } else if (tag == "generation") {
      node->type = Node::Type::kScope;
      ExpectBlockEnd();
      node->body = Subparse({"endgeneration"});
      Next();
      ExpectBlockEnd();
    } else {
      SyntaxError(line, "Encountered unknown tag '" + tag + "'.");
    }
    return node;
  }

  // for/set targets: a name, a tuple of names, or (set only) namespace.attribute.
  void ParseAssignTargets(Node* node, bool allow_attribute) {
    bool parens = SkipOp("(");
    while (true) {
      std::string name = ExpectName();
      if (allow_attribute && node->targets.empty() && IsOp(".")) {
        Next();
        node->attribute = ExpectName();
        node->targets.push_back(name);
        break;
      }
      node->targets.push_back(name);
      if (!SkipOp(",")) break;
      if (Cur().type != Tok::kName) break;
    }
    if (parens) ExpectOp(")");
  }

  // (a, b=default, ...) for macros and call blocks.
  void ParseSignature(Node* node) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!node->targets.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      node->targets.push_back(ExpectName());
      node->values.push_back(SkipOp("=") ? ParseExpression(true) : nullptr);
    }
    ExpectOp(")");
  }

  ExprPtr MakeExpr(Expr::Type type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  bool IsTupleEnd(const std::vector<std::string>& extra_end) const {
    const Token& t = Cur();
    if (t.type == Tok::kVarEnd || t.type == Tok::kBlockEnd || t.type == Tok::kEof) return true;
    if (t.type == Tok::kOp && (t.value == ")" || t.value == "]" || t.value == "}")) return true;
    if (t.type == Tok::kName) {
      for (const auto& e : extra_end) {
        if (t.value == e) return true;
      }
    }
    return false;
  }

  ExprPtr ParseTuple(bool with_condexpr, bool explicit_parens,
                     const std::vector<std::string>& extra_end) {
    int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) ExpectOp(",");
      if (IsTupleEnd(extra_end)) break;
      items.push_back(ParseExpression(with_condexpr));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) SyntaxError(line, "expected an expression, got " + Describe(Cur()));
    }
    auto e = MakeExpr(Expr::Type::kTuple, line);
    e->children = std::move(items);
    return e;
  }

  ExprPtr ParseExpression(bool with_condexpr) {
    DepthGuard guard(this);
    if (!with_condexpr) return ParseOr();
    ExprPtr expr = ParseOr();
    while (IsName("if")) {
      int line = Cur().line;
      Next();
      ExprPtr test = ParseOr();
      ExprPtr otherwise;
      if (SkipName("else")) otherwise = ParseExpression(true);
      auto cond = MakeExpr(Expr::Type::kCondition, line);
      cond->children.push_back(std::move(test));
      cond->children.push_back(std::move(expr));
      cond->children.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr Binary(Expr::Type type, ExprPtr left, ExprPtr right, int line, std::string op = {}) {
    auto e = MakeExpr(type, line);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      int line = Cur().line;
      Next();
      left = Binary(Expr::Type::kOr, std::move(left), ParseAnd(), line);
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      int line = Cur().line;
      Next();
      left = Binary(Expr::Type::kAnd, std::move(left), ParseNot(), line);
    }
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      int line = Cur().line;
      Next();
      auto e = MakeExpr(Expr::Type::kNot, line);
      e->children.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    int line = Cur().line;
    ExprPtr first = ParseMath1();
    ExprPtr result;
    while (true) {
      std::string op;
      const Token& t = Cur();
      if (t.type == Tok::kOp && (t.value == "==" || t.value == "!=" || t.value == "<" ||
                                 t.value == "<=" || t.value == ">" || t.value == ">=")) {
        op = t.value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == Tok::kName && Peek().value == "in") {
        op = "notin";
        Next();
        Next();
      } else {
        break;
      }
      if (!result) {
        result = MakeExpr(Expr::Type::kCompare, line);
        result->children.push_back(std::move(first));
      }
      result->ops.push_back(op);
      result->children.push_back(ParseMath1());
    }
    return result ? std::move(result) : std::move(first);
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      std::string op = Cur().value;
      int line = Cur().line;
      Next();
      left = Binary(Expr::Type::kBinary, std::move(left), ParseConcat(), line, op);
    }
    return left;
  }

  ExprPtr ParseConcat() {
    int line = Cur().line;
    ExprPtr first = ParseMath2();
    if (!IsOp("~")) return first;
    auto e = MakeExpr(Expr::Type::kConcat, line);
    e->children.push_back(std::move(first));
    while (SkipOp("~")) e->children.push_back(ParseMath2());
    return e;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Cur().value;
      int line = Cur().line;
      Next();
      left = Binary(Expr::Type::kBinary, std::move(left), ParsePow(), line, op);
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      int line = Cur().line;
      Next();
      left = Binary(Expr::Type::kBinary, std::move(left), ParseUnary(true), line, "**");
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    int line = Cur().line;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      bool neg = IsOp("-");
      Next();
      node = MakeExpr(neg ? Expr::Type::kNeg : Expr::Type::kPos, line);
      node->children.push_back(ParseUnary(false));
    } else {
      node = ParsePostfix(ParsePrimary());
    }
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    DepthGuard guard(this);
    const Token& t = Cur();
    int line = t.line;
    if (t.type == Tok::kName) {
      std::string name = t.value;
      Next();
      if (name == "true" || name == "True") return Const(Value::Bool(true), line);
      if (name == "false" || name == "False") return Const(Value::Bool(false), line);
      if (name == "none" || name == "None") return Const(Value::None(), line);
      auto e = MakeExpr(Expr::Type::kName, line);
      e->name = std::move(name);
      return e;
    }
    if (t.type == Tok::kString) {
      std::string s = t.value;
      Next();
      while (Cur().type == Tok::kString) {
        s += Cur().value;
        Next();
      }
      return Const(Value::String(std::move(s)), line);
    }
    if (t.type == Tok::kInt) {
      int64_t v = 0;
      auto res = std::from_chars(t.value.data(), t.value.data() + t.value.size(), v);
      Next();
      if (res.ec != std::errc())
        return Const(Value::Float(std::strtod(t.value.c_str(), nullptr)), line);
      return Const(Value::Int(v), line);
    }
    if (t.type == Tok::kFloat) {
      double v = std::strtod(t.value.c_str(), nullptr);
      Next();
      return Const(Value::Float(v), line);
    }
    if (IsOp("(")) {
      Next();
      ExprPtr e = ParseTuple(true, true, {});
      ExpectOp(")");
      return e;
    }
    if (IsOp("[")) {
      Next();
      auto e = MakeExpr(Expr::Type::kList, line);
      while (!IsOp("]")) {
        if (!e->children.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        e->children.push_back(ParseExpression(true));
      }
      ExpectOp("]");
      return e;
    }
    if (IsOp("{")) {
      Next();
      auto e = MakeExpr(Expr::Type::kDict, line);
      while (!IsOp("}")) {
        if (!e->children.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        e->children.push_back(ParseExpression(true));
        ExpectOp(":");
        e->children.push_back(ParseExpression(true));
      }
      ExpectOp("}");
      return e;
    }
    SyntaxError(line, "unexpected " + Describe(t));
  }

  ExprPtr Const(Value v, int line) {
    auto e = MakeExpr(Expr::Type::kConst, line);
    e->constant = std::move(v);
    return e;
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        node = ParseSubscript(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        node = ParseFilterChain(std::move(node));
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr node) {
    DepthGuard guard(this);
    int line = Cur().line;
    if (SkipOp(".")) {
      if (Cur().type == Tok::kName) {
        auto e = MakeExpr(Expr::Type::kGetAttr, line);
        e->name = Cur().value;
        Next();
        e->children.push_back(std::move(node));
        return e;
      }
      if (Cur().type == Tok::kInt) {
        auto e = MakeExpr(Expr::Type::kGetItem, line);
        e->children.push_back(std::move(node));
        e->children.push_back(ParsePrimary());
        return e;
      }
      SyntaxError(line, "expected name or number after '.'");
    }
    ExpectOp("[");
    ExprPtr start;
    if (!IsOp(":")) start = ParseExpression(true);
    if (IsOp(":")) {
      Next();
      auto e = MakeExpr(Expr::Type::kSlice, line);
      e->children.push_back(std::move(node));
      e->children.push_back(std::move(start));
      ExprPtr stop;
      ExprPtr step;
      if (!IsOp("]") && !IsOp(":")) stop = ParseExpression(true);
      if (SkipOp(":")) {
        if (!IsOp("]")) step = ParseExpression(true);
      }
      e->children.push_back(std::move(stop));
      e->children.push_back(std::move(step));
      ExpectOp("]");
      return e;
    }
    if (IsOp(",")) {
      // a[x, y]: a tuple key.
      auto tuple = MakeExpr(Expr::Type::kTuple, line);
      tuple->children.push_back(std::move(start));
      while (SkipOp(",")) {
        if (IsOp("]")) break;
        tuple->children.push_back(ParseExpression(true));
      }
      start = std::move(tuple);
    }
    ExpectOp("]");
    auto e = MakeExpr(Expr::Type::kGetItem, line);
    e->children.push_back(std::move(node));
    e->children.push_back(std::move(start));
    return e;
  }

  // Parses "(args)" into e->children (after any existing ones) and e->arg_names:
  // "" positional, "*" / "**" call-site unpacking (`f(*args)`, `f(**kwargs)`, at most
  // one each, as Jinja2's parse_call_args allows), else the keyword's name.
  void ParseArgs(Expr* e) {
    ExpectOp("(");
    bool first = true, star = false, star_star = false, keyword = false;
    auto invalid = [&] { SyntaxError(Cur().line, "invalid syntax for function call expression"); };
    while (!IsOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*")) {
        if (star || star_star) invalid();
        star = true;
        Next();
        e->arg_names.push_back("*");
      } else if (IsOp("**")) {
        if (star_star) invalid();
        star_star = true;
        Next();
        e->arg_names.push_back("**");
      } else if (Cur().type == Tok::kName && Peek().type == Tok::kOp && Peek().value == "=") {
        if (star_star) invalid();
        keyword = true;
        std::string name = Cur().value;
        Next();
        Next();
        e->arg_names.push_back(name);
      } else {
        if (keyword) SyntaxError(Cur().line, "positional argument follows keyword argument");
        if (star || star_star) invalid();
        e->arg_names.push_back("");
      }
      e->children.push_back(ParseExpression(true));
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr node) {
    DepthGuard guard(this);
    auto e = MakeExpr(Expr::Type::kCall, Cur().line);
    e->children.push_back(std::move(node));
    ParseArgs(e.get());
    return e;
  }

  // "| f(args) | g ..." applied to node (null in a filter block / set block).
  ExprPtr ParseFilterChain(ExprPtr node, bool leading_pipe = true) {
    bool first = true;
    while (first ? (!leading_pipe || IsOp("|")) : IsOp("|")) {
      DepthGuard guard(this);
      if (leading_pipe || !first) ExpectOp("|");
      first = false;
      auto e = MakeExpr(Expr::Type::kFilter, Cur().line);
      e->name = ExpectName();
      while (IsOp(".")) {
        Next();
        e->name += "." + ExpectName();
      }
      e->children.push_back(std::move(node));
      if (IsOp("(")) ParseArgs(e.get());
      node = std::move(e);
    }
    return node;
  }

  ExprPtr ParseTest(ExprPtr node) {
    DepthGuard guard(this);
    auto e = MakeExpr(Expr::Type::kTest, Cur().line);
    Next();  // "is"
    if (SkipName("not")) e->negated = true;
    e->name = ExpectName();
    while (IsOp(".")) {
      Next();
      e->name += "." + ExpectName();
    }
    e->children.push_back(std::move(node));
    const Token& t = Cur();
    if (IsOp("(")) {
      ParseArgs(e.get());
    } else if ((t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInt ||
                t.type == Tok::kFloat || IsOp("[") || IsOp("{")) &&
               !(t.type == Tok::kName &&
                 (t.value == "else" || t.value == "or" || t.value == "and"))) {
      if (IsName("is")) SyntaxError(t.line, "you cannot chain multiple tests with 'is'");
      e->arg_names.push_back("");
      e->children.push_back(ParsePostfix(ParsePrimary()));
    }
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Body Parser::Parse(std::string_view source) {
  Lexer lexer(source);
  ParserImpl parser(lexer.Tokenize());
  return parser.ParseTemplate();
}

}  // namespace infera::jinja
