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

}  // namespace
}  // namespace infera::tokenizer
