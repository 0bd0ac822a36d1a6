// Python str semantics on UTF-8 byte strings: code-point decoding, whitespace as
// str.isspace() defines it, strip/split, case mapping, repr(), float repr, json.dumps
// string escaping. Used by the template engine so its output matches CPython's.
//
// Invalid UTF-8 bytes decode as U+FFFD for code-point operations (input JSON parsed by
// nlohmann is already valid UTF-8). All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infera::jinja::py {

std::vector<char32_t> Decode(std::string_view s);
void AppendUtf8(char32_t cp, std::string& out);
std::string Encode(const std::vector<char32_t>& cps, size_t begin, size_t end);
size_t CodePointCount(std::string_view s);
bool IsAscii(std::string_view s);

// str.isspace() for one code point (also what `\s` matches in Python's re).
bool IsSpace(char32_t cp);

// str.strip/lstrip/rstrip: with chars == nullptr, Unicode whitespace; otherwise the
// code points of *chars.
std::string Strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(): no separator splits on whitespace runs and drops empty parts.
std::vector<std::string> SplitWhitespace(std::string_view s, int64_t max_split);
std::vector<std::string> Split(std::string_view s, std::string_view sep, int64_t max_split);
std::vector<std::string> RSplit(std::string_view s, std::string_view sep, int64_t max_split);
std::string Replace(std::string_view s, std::string_view old_part, std::string_view new_part,
                    int64_t count);
std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
std::string Title(std::string_view s);       // str.title()
std::string Capitalize(std::string_view s);  // str.capitalize()

// repr() of a str, and of a float (shortest round-trip, Python's formatting rules).
std::string ReprString(std::string_view s);
std::string ReprFloat(double f);
// json.dumps of a str with ensure_ascii as given.
void AppendJsonString(std::string_view s, bool ensure_ascii, std::string& out);

}  // namespace infera::jinja::py
