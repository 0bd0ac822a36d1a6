#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/test_tokenizers.h"

namespace infera::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Tokenizer> Make(const nlohmann::json& j) {
  auto t = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(TokenizerTest, ByteLevelMergesByRank) {
  auto t = Make(testing::ByteLevelTokenizer());
  EXPECT_THAT(t->Encode("hello world", false), ElementsAre(259, 263));
  // Equal-rank pairs merge leftmost first: aaaaa -> aa a a a -> aa aa a -> aaaa a.
  EXPECT_THAT(t->Encode("aaaaa", false), ElementsAre(270, 'a'));
  EXPECT_THAT(t->Encode("", false), ElementsAre());
}

TEST(TokenizerTest, PairMergeFormatEqualsStringFormat) {
  auto a = Make(testing::ByteLevelTokenizer(/*pair_merges=*/false));
  auto b = Make(testing::ByteLevelTokenizer(/*pair_merges=*/true));
  for (const char* s : {"hello world", "the inn", "  x", "aaaaaaa"}) {
    EXPECT_EQ(a->Encode(s, false), b->Encode(s, false)) << s;
  }
}

TEST(TokenizerTest, IgnoreMergesUsesWholeWordToken) {
  auto merging = Make(testing::ByteLevelTokenizer(false, /*ignore_merges=*/false));
  auto ignoring = Make(testing::ByteLevelTokenizer(false, /*ignore_merges=*/true));
  EXPECT_THAT(merging->Encode(" whole", false), ElementsAre(260, 'h', 'o', 'l', 'e'));
  EXPECT_THAT(ignoring->Encode(" whole", false), ElementsAre(271));
}

// The per-thread front of the word cache is shared by all models on a thread: entries
// are tagged per model instance, so two models (with different results for the same
// word) and a model replacing a destroyed one at the same address never see each
// other's ids.
TEST(TokenizerTest, WordCacheFrontKeepsModelsApart) {
  nlohmann::json no_merges_json = testing::ByteLevelTokenizer();
  no_merges_json["model"]["merges"] = nlohmann::json::array();
  auto merging = Make(testing::ByteLevelTokenizer());
  auto bytes = Make(no_merges_json);
  const std::vector<uint32_t> merged = merging->Encode("hello world", false);
  const std::vector<uint32_t> unmerged = bytes->Encode("hello world", false);
  ASSERT_NE(merged, unmerged);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(merging->Encode("hello world", false), merged);
    EXPECT_EQ(bytes->Encode("hello world", false), unmerged);
  }
  // Models created and destroyed in turn (possibly at the same address).
  for (int round = 0; round < 4; ++round) {
    auto t = Make(round % 2 == 0 ? testing::ByteLevelTokenizer() : no_merges_json);
    EXPECT_EQ(t->Encode("hello world", false), round % 2 == 0 ? merged : unmerged) << round;
  }
}

TEST(TokenizerTest, SpecialTokensCutTheText) {
  auto t = Make(testing::ByteLevelTokenizer());
  EXPECT_THAT(t->Encode("<|im_start|>user\nhi<|im_end|>", false),
              ElementsAre(1000, 'u', 's', 'e', 'r', '\n', 'h', 'i', 1001));
  // Partial special-token text is ordinary text.
  EXPECT_THAT(t->Encode("<|im_sta", false), ElementsAre('<', '|', 'i', 'm', '_', 's', 't', 'a'));
}

TEST(TokenizerTest, NfcNormalizerComposes) {
  auto t = Make(testing::ByteLevelTokenizer());
  // e + COMBINING ACUTE -> é (C3 A9), each byte one id.
  EXPECT_THAT(t->Encode("e\xCC\x81", false), ElementsAre(0xC3, 0xA9));
}

TEST(TokenizerTest, InvalidUtf8BecomesReplacementCharacters) {
  auto t = Make(testing::ByteLevelTokenizer());
  EXPECT_THAT(t->Encode("a\xFF"
                        "b",
                        false),
              ElementsAre('a', 0xEF, 0xBF, 0xBD, 'b'));
  // A truncated sequence is one maximal subpart: one U+FFFD.
  EXPECT_THAT(t->Encode("\xE2\x82", false), ElementsAre(0xEF, 0xBF, 0xBD));
  // An encoded surrogate is three invalid bytes: three U+FFFD.
  EXPECT_EQ(t->Encode("\xED\xA0\x80", false).size(), 9u);
  // Never crashes on arbitrary bytes.
  std::string junk;
  for (int i = 0; i < 2000; ++i) junk.push_back(static_cast<char>((i * 131 + 7) % 256));
  EXPECT_FALSE(t->Encode(junk, true).empty());
}

TEST(TokenizerTest, MetaspaceStyleWithByteFallbackAndBos) {
  auto t = Make(testing::MetaspaceTokenizer());
  EXPECT_THAT(t->Encode("hello world", false), ElementsAre(275, 280));
  EXPECT_THAT(t->Encode("hello world", true), ElementsAre(2, 275, 280));
  // 'i' is not in the vocabulary: byte fallback <0x69>.
  EXPECT_THAT(t->Encode("hi", false), ElementsAre(264, 4 + 0x69));
  EXPECT_THAT(t->Encode("中", false), ElementsAre(4 + 0xE4, 4 + 0xB8, 4 + 0xAD));
  EXPECT_THAT(t->Encode("a  b", false), ElementsAre(261, 281, 262));
  EXPECT_THAT(t->Encode("<bos>a", false), ElementsAre(2, 261));
}

TEST(TokenizerTest, AddedTokenFlags) {
  nlohmann::json j = testing::ByteLevelTokenizer();
  auto add = [&](int id, const char* content, const char* flag) {
    nlohmann::json a = {{"id", id},        {"content", content}, {"single_word", false},
                        {"lstrip", false}, {"rstrip", false},    {"normalized", false},
                        {"special", false}};
    if (flag != nullptr) a[flag] = true;
    j["added_tokens"].push_back(a);
  };
  add(1002, "<mask>", "lstrip");
  add(1003, "[X]", "rstrip");
  add(1004, "ab", "single_word");
  add(1005, "<a>", nullptr);
  add(1006, "<a><b>", nullptr);
  auto t = Make(j);
  EXPECT_THAT(t->Encode("a <mask>", false), ElementsAre('a', 1002));
  EXPECT_THAT(t->Encode("[X]  b", false), ElementsAre(1003, 'b'));
  EXPECT_THAT(t->Encode("xab", false), ElementsAre('x', 'a', 'b'));
  EXPECT_THAT(t->Encode("x ab y", false), ElementsAre('x', ' ', 1004, ' ', 'y'));
  EXPECT_THAT(t->Encode("<a><b><a>", false), ElementsAre(1006, 1005));
  EXPECT_EQ(t->TokenToId("<a><b>"), 1006u);
  EXPECT_EQ(t->TokenToId("Ġworld"), 263u);
  EXPECT_EQ(t->IdToToken(1000), "<|im_start|>");
  EXPECT_EQ(t->vocab_size(), 1007u);
}

TEST(TokenizerTest, NormalizerSequence) {
  nlohmann::json j = testing::ByteLevelTokenizer();
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers", nlohmann::json::array(
                          {{{"type", "NFKC"}},
                           {{"type", "Lowercase"}},
                           {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                           {{"type", "Replace"}, {"pattern", {{"Regex", "o+"}}}, {"content", "0"}},
                           {{"type", "Prepend"}, {"prepend", "@"}}})}};
  auto t = Make(j);
  // NFKC: ﬁ -> fi; lowercase; strip; "oo" -> "0"; prepend "@".
  EXPECT_THAT(t->Encode("  \xEF\xAC\x81 BOOK  ", false),
              ElementsAre('@', 'f', 'i', ' ', 'b', '0', 'k'));
}

std::vector<std::string> Words(const nlohmann::json& config, std::string_view text) {
  auto p = PreTokenizer::FromJson(config);
  EXPECT_TRUE(p.ok()) << p.status();
  std::vector<PreTokenizer::Word> words;
  std::deque<std::string> storage;
  (*p)->PreTokenize(text, true, &words, &storage);
  std::vector<std::string> out;
  for (const auto& w : words) out.emplace_back(w.text);
  return out;
}

TEST(PreTokenizerTest, SplitBehaviours) {
  auto split = [](const char* behavior, bool invert) {
    return nlohmann::json{{"type", "Split"},
                          {"pattern", {{"String", "-"}}},
                          {"behavior", behavior},
                          {"invert", invert}};
  };
  const char* text = "a-b--c-";
  EXPECT_THAT(Words(split("Removed", false), text), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Words(split("Isolated", false), text),
              ElementsAre("a", "-", "b", "-", "-", "c", "-"));
  EXPECT_THAT(Words(split("MergedWithPrevious", false), text), ElementsAre("a-", "b-", "-", "c-"));
  EXPECT_THAT(Words(split("MergedWithNext", false), text), ElementsAre("a", "-b", "-", "-c", "-"));
  EXPECT_THAT(Words(split("Contiguous", false), text), ElementsAre("a", "-", "b", "--", "c", "-"));
  EXPECT_THAT(Words(split("Removed", true), text), ElementsAre("-", "-", "-", "-"));
}

TEST(PreTokenizerTest, OtherPreTokenizers) {
  EXPECT_THAT(Words({{"type", "Digits"}, {"individual_digits", true}}, "ab123c"),
              ElementsAre("ab", "1", "2", "3", "c"));
  EXPECT_THAT(Words({{"type", "Digits"}, {"individual_digits", false}}, "ab123c"),
              ElementsAre("ab", "123", "c"));
  EXPECT_THAT(Words({{"type", "Punctuation"}}, "hi, there!"),
              ElementsAre("hi", ",", " there", "!"));
  EXPECT_THAT(Words({{"type", "Whitespace"}}, "hi, there!  x"),
              ElementsAre("hi", ",", "there", "!", "x"));
  EXPECT_THAT(Words({{"type", "WhitespaceSplit"}}, " a  b\tc "), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Words({{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}},
                    "hi there"),
              ElementsAre("▁hi", "▁there"));
  EXPECT_THAT(Words({{"type", "Metaspace"},
                     {"replacement", "▁"},
                     {"prepend_scheme", "never"},
                     {"split", false}},
                    "hi there"),
              ElementsAre("hi▁there"));
  EXPECT_THAT(Words({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}},
                    "hello world's  x"),
              ElementsAre(" hello", " world", "'s", " ", " x"));
  // Oniguruma's \s: U+180E is not whitespace, U+3000 is.
  EXPECT_THAT(Words({{"type", "Split"},
                     {"pattern", {{"Regex", "\\s+"}}},
                     {"behavior", "Removed"},
                     {"invert", false}},
                    "a\xE1\xA0\x8E"
                    "b\xE3\x80\x80"
                    "c"),
              ElementsAre("a\xE1\xA0\x8E"
                          "b",
                          "c"));
}

TEST(TokenizerTest, BadFilesGiveClearErrors) {
  EXPECT_EQ(Tokenizer::FromJson("{").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromJson("[]").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromJson("{}").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::Load("/nonexistent/dir").status().code(), absl::StatusCode::kNotFound);

  nlohmann::json j = testing::ByteLevelTokenizer();
  j["normalizer"] = {{"type", "Mystery"}};
  EXPECT_THAT(std::string(Tokenizer::FromJson(j.dump()).status().message()),
              HasSubstr("unsupported normalizer type 'Mystery'"));

  j = testing::ByteLevelTokenizer();
  j["model"]["merges"].push_back("zz qq");
  EXPECT_THAT(std::string(Tokenizer::FromJson(j.dump()).status().message()),
              HasSubstr("not in vocab"));

  j = testing::ByteLevelTokenizer();
  j["model"]["ignore_merges"] = "yes";  // wrong JSON type
  EXPECT_EQ(Tokenizer::FromJson(j.dump()).status().code(), absl::StatusCode::kInvalidArgument);

  j = testing::ByteLevelTokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_THAT(std::string(Tokenizer::FromJson(j.dump()).status().message()),
              HasSubstr("bad regex"));

  j = testing::ByteLevelTokenizer();
  j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Digits"}});
  EXPECT_THAT(std::string(Tokenizer::FromJson(j.dump()).status().message()),
              HasSubstr("ByteLevel must be the last step"));

  j = testing::ByteLevelTokenizer();
  j["added_tokens"][0]["id"] = "one";
  EXPECT_EQ(Tokenizer::FromJson(j.dump()).status().code(), absl::StatusCode::kInvalidArgument);

  // Found by tokenizer_json_fuzz: a huge vocab id must not size a huge table.
  j = testing::ByteLevelTokenizer();
  j["model"]["vocab"]["zz"] = 111111111;
  EXPECT_THAT(std::string(Tokenizer::FromJson(j.dump()).status().message()),
              HasSubstr("too large"));
}

// model.vocab and model.merges are read by the streaming loader, not the JSON document:
// malformed entries there give the same errors, and keys named "vocab"/"merges"
// elsewhere are ordinary document values.
TEST(TokenizerTest, StreamedVocabAndMergesReportBadEntries) {
  auto message = [](const nlohmann::json& j) {
    return std::string(Tokenizer::FromJson(j.dump()).status().message());
  };
  nlohmann::json j = testing::ByteLevelTokenizer();
  j["model"]["vocab"]["zz"] = -1;
  EXPECT_THAT(message(j), HasSubstr("bad id for token 'zz'"));
  j["model"]["vocab"]["zz"] = 1.5;
  EXPECT_THAT(message(j), HasSubstr("bad id for token 'zz'"));
  j["model"]["vocab"]["zz"] = {{"nested", 1}};
  EXPECT_THAT(message(j), HasSubstr("bad id for token 'zz'"));
  j["model"]["vocab"]["zz"] = nlohmann::json::array({1});
  EXPECT_THAT(message(j), HasSubstr("bad id for token 'zz'"));

  for (nlohmann::json bad :
       {nlohmann::json(1), nlohmann::json::array({"a"}), nlohmann::json::array({"a", "b", "c"}),
        nlohmann::json::array({"a", 1}), nlohmann::json::object({{"a", "b"}}),
        nlohmann::json::array({nlohmann::json::array({"a", "b"})})}) {
    j = testing::ByteLevelTokenizer();
    j["model"]["merges"].push_back(bad);
    EXPECT_THAT(message(j), HasSubstr("merge must be")) << bad.dump();
  }
  j = testing::ByteLevelTokenizer();
  j["model"]["merges"].push_back("nospace");
  EXPECT_THAT(message(j), HasSubstr("bad merge 'nospace'"));

  // Wrong container types stay document values and are rejected as before.
  j = testing::ByteLevelTokenizer();
  j["model"]["vocab"] = nlohmann::json::array();
  EXPECT_THAT(message(j), HasSubstr("'vocab' object expected"));
  j = testing::ByteLevelTokenizer();
  j["model"]["merges"] = nlohmann::json::object();
  EXPECT_THAT(message(j), HasSubstr("'merges' array"));

  // "vocab"/"merges" keys outside model are untouched; the tokenizer still works.
  j = testing::ByteLevelTokenizer();
  j["extra"] = {{"vocab", {{"a", 1}}}, {"merges", nlohmann::json::array({"a b"})}};
  j["model"]["extra"] = {{"vocab", {{"x", "y"}}}};
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  auto reference = Tokenizer::FromJson(testing::ByteLevelTokenizer().dump());
  ASSERT_TRUE(reference.ok());
  EXPECT_EQ((*t)->Encode("hello world", false), (*reference)->Encode("hello world", false));
  EXPECT_EQ((*t)->vocab_size(), (*reference)->vocab_size());
}

TEST(TokenizerTest, LoadFromDirectoryAndFile) {
  std::string dir = ::testing::TempDir() + "/tok_load_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/tokenizer.json");
    out << testing::ByteLevelTokenizer().dump();
  }
  auto from_dir = Tokenizer::Load(dir);
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  auto from_file = Tokenizer::Load(dir + "/tokenizer.json");
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ((*from_dir)->Encode("hello", false), (*from_file)->Encode("hello", false));
}

TEST(TokenizerTest, ConcurrentEncodesAgree) {
  auto t = Make(testing::ByteLevelTokenizer());
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    texts.push_back("hello world the inn " + std::to_string(i * 7919) + " aaaa<|im_end|> x" +
                    std::string(static_cast<size_t>(i % 7), ' '));
  }
  std::vector<std::vector<uint32_t>> expected;
  for (const auto& s : texts) expected.push_back(t->Encode(s, false));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          size_t j = (i + static_cast<size_t>(k) * 37) % texts.size();
          if (t->Encode(texts[j], false) != expected[j]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TokenizerTest, SafeBoundariesSplitEncodingExactly) {
  auto t = Make(testing::ByteLevelTokenizer());
  std::vector<std::string> pieces = {
      "<|im_start|>", "<|im_end|>", "user\n", " hello",    "  ", "world",
      "\n\n",         "<|im_sta",   "é",      "e\xCC\x81", "!!"};
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>(state >> 33);
  };
  int checked = 0;
  for (int round = 0; round < 300; ++round) {
    std::string text;
    size_t n = 1 + next() % 12;
    for (size_t i = 0; i < n; ++i) text += pieces[next() % pieces.size()];
    std::vector<uint32_t> full = t->Encode(text, false);
    for (size_t q : t->SafeBoundaries(text)) {
      ASSERT_GT(q, 0u);
      ASSERT_LT(q, text.size());
      std::vector<uint32_t> split = t->Encode(text.substr(0, q), false);
      std::vector<uint32_t> tail = t->Encode(text.substr(q), false);
      split.insert(split.end(), tail.begin(), tail.end());
      ASSERT_EQ(split, full) << text << " at " << q;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_THAT(t->SafeBoundaries("<|im_start|>a<|im_end|>\n<|im_start|>b"), ElementsAre(13, 24));
}

}  // namespace
}  // namespace infera::tokenizer
