#include "doctor/checks.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace infera::doctor {
namespace {

// Engine hashes of a probe's blocks, as a fake engine names them (any distinct values).
std::vector<core::BlockHash> FakeHashes(size_t first_block, size_t count, uint64_t seed) {
  std::vector<core::BlockHash> h;
  for (size_t i = 0; i < count; ++i) h.push_back(seed * 1000003 + first_block + i);
  return h;
}

StoredEvent Event(const ProbePrompt& p, size_t offset, size_t tokens, size_t bs,
                  const std::vector<core::BlockHash>& hashes,
                  std::optional<core::BlockHash> parent) {
  return StoredEvent{hashes, std::span<const core::TokenId>(p.tokens).subspan(offset, tokens),
                     parent, static_cast<uint32_t>(bs)};
}

TEST(ProbePromptTest, FixedPartIsTheSameEveryRunAndTheNonceIsNot) {
  const ProbePrompt a = MakeProbePrompt(1), b = MakeProbePrompt(2);
  ASSERT_EQ(a.tokens.size(), kFixedTokens + kNonceTokens + 1);
  EXPECT_TRUE(std::equal(a.tokens.begin(), a.tokens.begin() + kFixedTokens, b.tokens.begin()));
  EXPECT_FALSE(
      std::equal(a.tokens.begin() + kFixedTokens, a.tokens.end(), b.tokens.begin() + kFixedTokens));
  for (core::TokenId id : a.tokens) {
    EXPECT_GE(id, kMinTokenId);
    EXPECT_LT(id, kMinTokenId + kTokenIdSpan);
  }
  const nlohmann::json body = nlohmann::json::parse(ProbeCompletionBody(a, "m"));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"].size(), a.tokens.size());
  EXPECT_EQ(body["max_tokens"], 1);
  EXPECT_FALSE(nlohmann::json::parse(ProbeCompletionBody(a, "")).contains("model"));
}

TEST(SightingTest, ColdEngineStoresTheWholeProbe) {
  const ProbePrompt p = MakeProbePrompt(7);
  const auto hashes = FakeHashes(0, 32, 1);
  ProbeSighting seen;
  AddSighting(p, Event(p, 0, 512, 16, hashes, std::nullopt), seen);
  EXPECT_TRUE(seen.located);
  EXPECT_TRUE(seen.nonce_seen);
  EXPECT_EQ(seen.block_size, 16u);
  ASSERT_TRUE(seen.fingerprint);
  EXPECT_EQ(*seen.fingerprint, hashes[15]);  // the block ending at token 256
}

TEST(SightingTest, CachedFixedPartGivesTheFingerprintAsTheParent) {
  const ProbePrompt p = MakeProbePrompt(7);
  ProbeSighting seen;
  AddSighting(p, Event(p, kFixedTokens, 256, 16, FakeHashes(16, 16, 1), 0xfeed), seen);
  EXPECT_TRUE(seen.nonce_seen);
  ASSERT_TRUE(seen.fingerprint);
  EXPECT_EQ(*seen.fingerprint, 0xfeedu);
}

TEST(SightingTest, SplitEventsAndOtherBlockSizes) {
  const ProbePrompt p = MakeProbePrompt(9);
  ProbeSighting seen;
  // Block size 32, stored in two events: the fixed part alone, then the nonce.
  const auto first = FakeHashes(0, 8, 3);
  AddSighting(p, Event(p, 0, 256, 0, first, std::nullopt), seen);  // block_size absent
  EXPECT_FALSE(seen.nonce_seen);
  EXPECT_EQ(seen.block_size, 32u);
  AddSighting(p, Event(p, 256, 256, 32, FakeHashes(8, 8, 3), first.back()), seen);
  EXPECT_TRUE(seen.nonce_seen);
  EXPECT_EQ(*seen.fingerprint, first.back());
  // SGLang's default page size 1: one token per block.
  ProbeSighting one;
  AddSighting(p, Event(p, 0, 300, 1, FakeHashes(0, 300, 4), std::nullopt), one);
  EXPECT_TRUE(one.nonce_seen);
  EXPECT_EQ(one.block_size, 1u);
  EXPECT_EQ(*one.fingerprint, FakeHashes(0, 300, 4)[255]);
}

TEST(SightingTest, OtherTrafficAndMaskedTokensAreCountedNotLocated) {
  const ProbePrompt p = MakeProbePrompt(11);
  std::vector<core::TokenId> other(32, 5);
  std::vector<core::BlockHash> two = {1, 2};
  ProbeSighting seen;
  AddSighting(p, StoredEvent{two, other, std::nullopt, 16}, seen);
  std::vector<core::TokenId> masked(p.tokens.begin(), p.tokens.begin() + 32);
  for (core::TokenId& t : masked) t ^= 0x5a5a;
  AddSighting(p, StoredEvent{two, masked, std::nullopt, 16}, seen);
  EXPECT_FALSE(seen.located);
  EXPECT_EQ(seen.stored_events, 2u);
  EXPECT_FALSE(seen.fingerprint);
}

TEST(FingerprintTest, Verdicts) {
  const Fingerprint before{16, 0xabc, 40, "2026-12-01T10:00:00Z"};
  EXPECT_EQ(CompareFingerprint("w", "vllm", std::nullopt, before).verdict, Verdict::kSkip);
  // Same hash after the publisher restarted (seq started over): stable.
  const CheckResult ok = CompareFingerprint("w", "vllm", before, {16, 0xabc, 3, "t"});
  EXPECT_EQ(ok.verdict, Verdict::kOk);
  EXPECT_EQ(CompareFingerprint("w", "vllm", before, {16, 0xabc, 40, "t"}).verdict, Verdict::kOk);
  // Same hash, no restart seen: not shown yet.
  EXPECT_EQ(CompareFingerprint("w", "vllm", before, {16, 0xabc, 90, "t"}).verdict, Verdict::kSkip);
  // Another block size: a new fingerprint, nothing to compare.
  EXPECT_EQ(CompareFingerprint("w", "vllm", before, {32, 0xdef, 3, "t"}).verdict, Verdict::kSkip);
  // Another hash for the same tokens: the seed.
  const CheckResult bad = CompareFingerprint("w", "vllm", before, {16, 0xdef, 3, "t"});
  EXPECT_EQ(bad.verdict, Verdict::kFail);
  EXPECT_NE(bad.fix.find("PYTHONHASHSEED=0"), std::string::npos);
  EXPECT_NE(bad.detail.find("0x0000000000000abc"), std::string::npos);
  EXPECT_NE(CompareFingerprint("w", "sglang", before, {16, 1, 3, "t"}).fix.find("SGLang"),
            std::string::npos);
}

TEST(ReportTest, FailuresCarryCauseAndFixAndSetTheExitStatus) {
  std::vector<CheckResult> results = {
      {"", "router-tokenizer", Verdict::kOk, "dir", "", ""},
      {"w1", "reachable", Verdict::kOk, "200", "", ""},
      {"w1", "block-size", Verdict::kFail, "32 vs 16", "re-chunked", "vLLM --block-size 16"},
  };
  const std::string text = FormatReport(results);
  EXPECT_NE(text.find("router\n"), std::string::npos);
  EXPECT_NE(text.find("worker w1\n"), std::string::npos);
  EXPECT_NE(text.find("FAIL  block-size"), std::string::npos);
  EXPECT_NE(text.find("cause: re-chunked"), std::string::npos);
  EXPECT_NE(text.find("fix:   vLLM --block-size 16"), std::string::npos);
  EXPECT_NE(text.find("3 checks: 2 ok, 1 failed"), std::string::npos);
  EXPECT_TRUE(AnyFailed(results));
  results.pop_back();
  EXPECT_FALSE(AnyFailed(results));
}

TEST(FixTest, EngineFlags) {
  EXPECT_EQ(BlockSizeFlag("sglang", 16), "SGLang --page-size 16");
  EXPECT_NE(BlockSizeFlag("vllm", 16).find("vLLM --block-size 16"), std::string::npos);
  EXPECT_NE(KvEventsFlag("vllm", "tcp://10.0.0.5:6000").find("tcp://*:6000"), std::string::npos);
  EXPECT_NE(KvEventsFlag("sglang", "").find("\"endpoint\": \"tcp://*:5557\""), std::string::npos);
}

}  // namespace
}  // namespace infera::doctor
