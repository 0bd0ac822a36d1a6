#include "tokenizer/prefix_caching_encoder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tokenizer/test_tokenizers.h"

namespace infera::tokenizer {
namespace {

class PrefixCachingEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::FromJson(testing::ByteLevelTokenizer().dump());
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::move(*t);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

// A ChatML-like conversation of `turns` turns from a seeded generator.
std::string Chat(uint64_t seed, int turns) {
  static const char* kWords[] = {"hello", "world", "the",      "inn",  "é",  "e\xCC\x81", "!!",
                                 " ",     "\n",    "<|im_sta", "aaaa", "42", "<|im_end|>"};
  std::string out = "<|im_start|>system\nBe brief.<|im_end|>\n";
  uint64_t s = seed;
  for (int t = 0; t < turns; ++t) {
    out += t % 2 == 0 ? "<|im_start|>user\n" : "<|im_start|>assistant\n";
    for (int w = 0; w < 12; ++w) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      out += kWords[(s >> 33) % (sizeof(kWords) / sizeof(kWords[0]))];
      out += " ";
    }
    out += "<|im_end|>\n";
  }
  return out + "<|im_start|>assistant\n";
}

TEST_F(PrefixCachingEncoderTest, GrowingChatReusesPrefixAndMatchesFullEncode) {
  PrefixCachingEncoder enc(*tokenizer_, 8);
  for (uint64_t conversation = 0; conversation < 5; ++conversation) {
    for (int turns = 1; turns <= 12; ++turns) {
      std::string text = Chat(conversation, turns);
      ASSERT_EQ(enc.Encode(text), tokenizer_->Encode(text, false))
          << "conversation " << conversation << " turns " << turns;
    }
  }
  PrefixCachingEncoder::Stats s = enc.stats();
  EXPECT_EQ(s.calls, 60u);
  EXPECT_GE(s.prefix_hits, 50u);
  EXPECT_GT(s.reused_bytes, s.tokenized_bytes);
}

TEST_F(PrefixCachingEncoderTest, IdenticalTextIsServedWhole) {
  PrefixCachingEncoder enc(*tokenizer_, 4);
  std::string text = Chat(7, 3);
  auto first = enc.Encode(text);
  auto second = enc.Encode(text);
  EXPECT_EQ(first, second);
  EXPECT_EQ(enc.stats().prefix_hits, 1u);
  EXPECT_EQ(enc.stats().reused_bytes, text.size());
}

TEST_F(PrefixCachingEncoderTest, EdgeCasesStayExact) {
  PrefixCachingEncoder enc(*tokenizer_, 2);
  for (std::string text :
       {std::string(""), std::string("no specials at all"), std::string("<|im_start|>"),
        std::string("a<|im_start|>"), std::string("a\xFF<|im_start|>b\xC3"),
        std::string("<|im_end|><|im_end|>")}) {
    EXPECT_EQ(enc.Encode(text), tokenizer_->Encode(text, false)) << text;
    EXPECT_EQ(enc.Encode(text + "x"), tokenizer_->Encode(text + "x", false)) << text;
  }
  // Diverging continuations of the same prefix.
  std::string base = Chat(3, 4);
  for (const char* tail : {"<|im_start|>user\nA", "<|im_start|>user\nB", "<|im_", "x<|im_end|>"}) {
    EXPECT_EQ(enc.Encode(base + tail), tokenizer_->Encode(base + tail, false)) << tail;
  }
}

TEST_F(PrefixCachingEncoderTest, CapacityBoundsTheCache) {
  PrefixCachingEncoder enc(*tokenizer_, 1);
  std::string a = Chat(1, 4), b = Chat(2, 4);
  enc.Encode(a);
  enc.Encode(b);  // evicts a
  uint64_t hits = enc.stats().prefix_hits;
  EXPECT_EQ(enc.Encode(a + "<|im_start|>x"), tokenizer_->Encode(a + "<|im_start|>x", false));
  // a's only shared prefix with b is the system turn: a hit, but a short one.
  EXPECT_LE(enc.stats().prefix_hits, hits + 1);
}

TEST_F(PrefixCachingEncoderTest, ConcurrentCallersGetExactIds) {
  PrefixCachingEncoder enc(*tokenizer_, 16);
  std::vector<std::string> texts;
  for (int c = 0; c < 6; ++c) {
    for (int t = 1; t <= 8; ++t) texts.push_back(Chat(static_cast<uint64_t>(c), t));
  }
  std::vector<std::vector<uint32_t>> expected;
  for (const auto& t : texts) expected.push_back(tokenizer_->Encode(t, false));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          size_t j = (i * (static_cast<size_t>(k) + 1) + static_cast<size_t>(round)) % texts.size();
          if (enc.Encode(texts[j]) != expected[j]) ++mismatches;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// A tokenizer whose added tokens overlap: a long token extending <|im_start|>, a short
// one, and one starting with whitespace; the remembered prompt's boundary is reusable
// only when the bytes that decide it (up to the longest token walk) are shared.
std::unique_ptr<Tokenizer> OverlappingTokenizer() {
  nlohmann::json j = testing::ByteLevelTokenizer();
  j["added_tokens"].push_back({{"id", 1002},
                               {"content", "<|im_start|>assistant_with_a_long_name"},
                               {"special", true},
                               {"normalized", false}});
  j["added_tokens"].push_back(
      {{"id", 1003}, {"content", "<x>"}, {"special", true}, {"normalized", false}});
  j["added_tokens"].push_back(
      {{"id", 1004}, {"content", "\n\n"}, {"special", true}, {"normalized", false}});
  auto t = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// Random texts from fragments that make added tokens, near misses of them, invalid
// UTF-8 and multi-byte characters; pairs that share a random-length prefix. Every
// encode through the cache equals a cold encode.
TEST(PrefixCachingEncoderRandomTest, SharedPrefixesOfRandomTextsStayExact) {
  std::unique_ptr<Tokenizer> tokenizer = OverlappingTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  static const char* kFragments[] = {"<|im_start|>",
                                     "<|im_start|>assistant",
                                     "_with_a_long_name",
                                     "<|im_end|>",
                                     "<x>",
                                     "<x",
                                     "\n",
                                     "\n\n",
                                     " ",
                                     "word",
                                     "é",
                                     "\xE4\xBD\xA0",
                                     "\xFF",
                                     "<",
                                     "|",
                                     "assistant",
                                     "42"};
  uint64_t s = 99;
  auto next = [&s] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return s >> 33;
  };
  auto random_text = [&](size_t fragments) {
    std::string out;
    for (size_t i = 0; i < fragments; ++i) out += kFragments[next() % std::size(kFragments)];
    return out;
  };
  PrefixCachingEncoder enc(*tokenizer, 4);
  size_t checked = 0;
  for (int round = 0; round < 300; ++round) {
    std::string a = random_text(20 + next() % 60);
    // Mostly valid text, so that safe boundaries exist.
    if (next() % 4 != 0) {
      for (char& c : a) {
        if (static_cast<unsigned char>(c) == 0xFF) c = '?';
      }
    }
    ASSERT_EQ(enc.Encode(a), tokenizer->Encode(a, false)) << a;
    for (int variant = 0; variant < 4; ++variant) {
      std::string b = a.substr(0, next() % (a.size() + 1)) + random_text(next() % 6);
      ASSERT_EQ(enc.Encode(b), tokenizer->Encode(b, false)) << "a=" << a << "\nb=" << b;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 1200u);
  EXPECT_GT(enc.stats().prefix_hits, 300u);
}

// The remembered prompt ends inside what could become a longer added token: its last
// boundary is not reused, the earlier ones are.
TEST(PrefixCachingEncoderRandomTest, BoundaryDecidedPastTheCommonPrefixIsNotReused) {
  std::unique_ptr<Tokenizer> tokenizer = OverlappingTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  PrefixCachingEncoder enc(*tokenizer, 4);
  std::string head = Chat(5, 6);
  std::string a = head + "<|im_start|>assistant";
  std::string b = head + "<|im_start|>assistant_with_a_long_name and more";
  ASSERT_EQ(enc.Encode(a), tokenizer->Encode(a, false));
  uint64_t reused_before = enc.stats().reused_bytes;
  ASSERT_EQ(enc.Encode(b), tokenizer->Encode(b, false));
  EXPECT_EQ(enc.stats().prefix_hits, 1u);
  // Reused at most up to the boundary before head's end, never the <|im_start|> of the
  // diverging turn.
  EXPECT_LE(enc.stats().reused_bytes - reused_before, head.size());
  EXPECT_GT(enc.stats().reused_bytes - reused_before, head.size() / 2);
}

}  // namespace
}  // namespace infera::tokenizer
