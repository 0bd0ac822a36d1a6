// Parser: template source → syntax tree, with the lexical rules of Jinja2 as Hugging
// Face configures it: trim_blocks and lstrip_blocks on, `{%-`/`-%}` whitespace control,
// `{%+` to keep leading whitespace, raw blocks, comments, newlines normalised to "\n"
// and one trailing newline dropped (keep_trailing_newline=False).
//
// Throws TemplateError(kSyntax) with "line N: message" on malformed input; nesting deeper
// than kMaxNesting is a syntax error rather than a stack overflow.
#pragma once

#include <string_view>

#include "template/ast.h"

namespace infera::jinja {

class Parser {
 public:
  static constexpr int kMaxNesting = 128;
  // Parses a whole template.
  static Body Parse(std::string_view source);
};

}  // namespace infera::jinja
