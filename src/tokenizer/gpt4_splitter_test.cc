#include "tokenizer/gpt4_splitter.h"

#include <gtest/gtest.h>

#include <string>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

constexpr const char* kPatterns[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

TEST(Gpt4SplitterTest, OnlyKnownPatterns) {
  EXPECT_NE(Gpt4Splitter::ForPattern(kPatterns[0]), nullptr);
  EXPECT_NE(Gpt4Splitter::ForPattern(kPatterns[1]), nullptr);
  EXPECT_EQ(Gpt4Splitter::ForPattern(R"(\p{L}+)"), nullptr);
}

// Differential test: the hand-written matcher equals PCRE2 on the same pattern.
TEST(Gpt4SplitterTest, MatchesRegexOnRandomText) {
  const std::vector<std::string> atoms = {
      "a",          "Z",       "hello",  "'",      "'s",       "'S",     "'re",    "'LL",
      "'ve",        "'x",      "'d",     "'m",     "'t",       " ",      "  ",     "\t",
      "\n",         "\r\n",    "\r",     "\u3000", "\u00a0",   "\u180e", "\u0085", "\u2028",
      "1",          "23",      "4567",   "\u0663", "\u00b2",   "\u2160", "!",      "?!",
      "(",          ")",       "$",      "_",      "-",        ".",      "中文",   "日本",
      "é",          "e\u0301", "\u0301", "😀",      "👍🏽", "\u200d", "\ufffd", "\U00014171",
      "\U0001E4F1", "\u017f",  "\u212a", "x",      " x",       " !",     " 1",     "\t\tx",
      " \n \n "};
  uint64_t state = 99;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>(state >> 33);
  };
  for (const char* pattern : kPatterns) {
    auto fast = Gpt4Splitter::ForPattern(pattern);
    auto regex = Regex::Compile(pattern);
    ASSERT_TRUE(regex.ok());
    for (int round = 0; round < 3000; ++round) {
      std::string text;
      size_t n = 1 + next() % 16;
      for (size_t i = 0; i < n; ++i) text += atoms[next() % atoms.size()];
      std::vector<std::pair<size_t, size_t>> a, b;
      fast->FindAll(text, &a);
      (*regex)->FindAll(text, &b);
      ASSERT_EQ(a, b) << "pattern " << pattern << " text '" << text << "'";
    }
  }
}

}  // namespace
}  // namespace infera::tokenizer
