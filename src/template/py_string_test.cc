#include "template/py_string.h"

#include <gtest/gtest.h>

#include <cmath>

namespace infera::jinja::py {
namespace {

TEST(PyStringTest, FloatReprMatchesPython) {
  EXPECT_EQ(ReprFloat(1.0), "1.0");
  EXPECT_EQ(ReprFloat(0.1), "0.1");
  EXPECT_EQ(ReprFloat(1e16), "1e+16");
  EXPECT_EQ(ReprFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(ReprFloat(0.0001), "0.0001");
  EXPECT_EQ(ReprFloat(0.00001), "1e-05");
  EXPECT_EQ(ReprFloat(-0.0), "-0.0");
  EXPECT_EQ(ReprFloat(1.5e-10), "1.5e-10");
  EXPECT_EQ(ReprFloat(123456789.125), "123456789.125");
  EXPECT_EQ(ReprFloat(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(ReprFloat(INFINITY), "inf");
}

TEST(PyStringTest, ReprStringPicksQuotesAndEscapes) {
  EXPECT_EQ(ReprString("a"), "'a'");
  EXPECT_EQ(ReprString("it's"), "\"it's\"");
  EXPECT_EQ(ReprString("it's \"x\""), "'it\\'s \"x\"'");
  EXPECT_EQ(ReprString("a\nb\t\\"), "'a\\nb\\t\\\\'");
  EXPECT_EQ(ReprString(std::string("\x01\x7f", 2)), "'\\x01\\x7f'");
  EXPECT_EQ(ReprString("\xc3\xa9\xe2\x80\xa8"), "'\xc3\xa9\\u2028'");
}

TEST(PyStringTest, JsonStringEscaping) {
  std::string out;
  AppendJsonString("\xc3\xa9\"\n\x01\x7f", false, out);
  EXPECT_EQ(out, "\"\xc3\xa9\\\"\\n\\u0001\x7f\"");
  out.clear();
  AppendJsonString("\xc3\xa9\xf0\x9f\x98\x80", true, out);
  EXPECT_EQ(out, "\"\\u00e9\\ud83d\\ude00\"");
}

TEST(PyStringTest, StripSplitUseUnicodeWhitespace) {
  EXPECT_EQ(Strip("\xc2\xa0 x \xe3\x80\x80", nullptr, true, true), "x");
  EXPECT_EQ(Strip("\xe2\x80\x8bx", nullptr, true, true), "\xe2\x80\x8bx");  // ZWSP is not space
  std::string chars = "x\xc3\xa9";
  EXPECT_EQ(Strip("\xc3\xa9xax\xc3\xa9", &chars, true, false), "ax\xc3\xa9");
  EXPECT_EQ(SplitWhitespace(" a \xe2\x80\x83 b ", -1), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(SplitWhitespace(" a b c ", 1), (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(Split("a,,b", ",", -1), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(RSplit("a,b,c", ",", 1), (std::vector<std::string>{"a,b", "c"}));
  EXPECT_EQ(Replace("abc", "", "-", -1), "-a-b-c-");
}

TEST(PyStringTest, CaseMapping) {
  EXPECT_EQ(Upper("stra\xc3\x9f"
                  "e"),
            "STRASSE");
  EXPECT_EQ(Lower("\xce\x9f\xce\xa3"), "\xce\xbf\xcf\x82");  // final sigma
  EXPECT_EQ(Title("hello wORLD o'neil"), "Hello World O'Neil");
  EXPECT_EQ(Capitalize("hELLO"), "Hello");
  EXPECT_EQ(CodePointCount("h\xc3\xa9\xf0\x9f\x98\x80"), 3u);
}

TEST(PyStringTest, InvalidUtf8NeverCrashes) {
  std::string bad = "a\xff\xc3";
  EXPECT_EQ(CodePointCount(bad), 3u);
  EXPECT_EQ(Decode(bad)[1], U'\xFFFD');
  EXPECT_FALSE(Upper(bad).empty());
}

}  // namespace
}  // namespace infera::jinja::py
