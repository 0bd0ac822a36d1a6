#include "router/encode/render_parity.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

namespace infera::router {
namespace {

using nlohmann::json;

const std::vector<core::TokenId> kOwn = {151644, 8948, 198, 2610, 525, 264};

ProbeOutcome Classify(int status, const std::string& body, std::string* detail = nullptr) {
  return ClassifyProbeAnswer(status, body, kOwn, detail);
}

TEST(RenderParityTest, EqualIdsAreExactInEitherAnswerShape) {
  std::string detail;
  // vLLM: {count, max_model_len, tokens}; SGLang: {tokens, count, max_model_len}.
  EXPECT_EQ(
      Classify(200, R"({"count":6,"max_model_len":4096,"tokens":[151644,8948,198,2610,525,264]})",
               &detail),
      ProbeOutcome::kExact);
  EXPECT_EQ(detail, "6 ids equal");
  EXPECT_EQ(
      Classify(200, R"({"tokens":[151644,8948,198,2610,525,264],"count":6,"max_model_len":1})"),
      ProbeOutcome::kExact);
}

TEST(RenderParityTest, AnyDifferenceDiverges) {
  std::string detail;
  // One extra trailing token (a template that appends one).
  EXPECT_EQ(Classify(200, R"({"tokens":[151644,8948,198,2610,525,264,198]})", &detail),
            ProbeOutcome::kDiverged);
  EXPECT_EQ(detail, "router 6 ids, worker 7, first difference at position 6");
  // One id changed in the middle.
  EXPECT_EQ(Classify(200, R"({"tokens":[151644,8948,199,2610,525,264]})", &detail),
            ProbeOutcome::kDiverged);
  EXPECT_EQ(detail, "router 6 ids, worker 6, first difference at position 2");
  // A shorter answer (a missing generation prompt).
  EXPECT_EQ(Classify(200, R"({"tokens":[151644,8948]})"), ProbeOutcome::kDiverged);
  EXPECT_EQ(Classify(200, R"({"tokens":[]})"), ProbeOutcome::kDiverged);
}

TEST(RenderParityTest, NoTokenizeEndpointIsUnsupported) {
  for (int status : {404, 405, 501}) {
    EXPECT_EQ(Classify(status, R"({"detail":"Not Found"})"), ProbeOutcome::kUnsupported) << status;
  }
}

TEST(RenderParityTest, FailuresAndMalformedAnswersAreErrors) {
  for (int status : {400, 401, 422, 500, 502, 503, 504, 302}) {
    EXPECT_EQ(Classify(status, R"({"tokens":[1]})"), ProbeOutcome::kError) << status;
  }
  for (const char* body :
       {"", "not json", "[]", R"({"count":6})", R"({"tokens":"1 2"})", R"({"tokens":[1,-2]})",
        R"({"tokens":[1,2.5]})", R"({"tokens":[4294967296]})", R"({"tokens":[[1,2]]})"}) {
    EXPECT_EQ(Classify(200, body), ProbeOutcome::kError) << body;
  }
}

TEST(RenderParityTest, VerdictRules) {
  using P = RenderParity;
  using O = ProbeOutcome;
  // First probe.
  EXPECT_EQ(NextParity(P::kUnknown, O::kExact), P::kExact);
  EXPECT_EQ(NextParity(P::kUnknown, O::kDiverged), P::kDiverged);
  EXPECT_EQ(NextParity(P::kUnknown, O::kUnsupported), P::kUnsupported);
  EXPECT_EQ(NextParity(P::kUnknown, O::kError), P::kUnknown);  // timeout/5xx: retried later
  // An error keeps whatever was known.
  EXPECT_EQ(NextParity(P::kExact, O::kError), P::kExact);
  EXPECT_EQ(NextParity(P::kDiverged, O::kError), P::kDiverged);
  EXPECT_EQ(NextParity(P::kUnsupported, O::kError), P::kUnsupported);
  // A later exact probe clears the mark; a later divergence sets it.
  EXPECT_EQ(NextParity(P::kDiverged, O::kExact), P::kExact);
  EXPECT_EQ(NextParity(P::kExact, O::kDiverged), P::kDiverged);
  EXPECT_EQ(NextParity(P::kDiverged, O::kUnsupported), P::kUnsupported);
  // Only a divergence counts as "renders differently".
  EXPECT_TRUE(CountsAsExact(P::kUnknown));
  EXPECT_TRUE(CountsAsExact(P::kExact));
  EXPECT_TRUE(CountsAsExact(P::kUnsupported));
  EXPECT_FALSE(CountsAsExact(P::kDiverged));
  EXPECT_STREQ(RenderParityName(P::kDiverged), "diverged");
  EXPECT_STREQ(ProbeOutcomeName(O::kError), "error");
}

TEST(RenderParityTest, RequestShapePerEngine) {
  EXPECT_EQ(ProbeShapeFor("sglang"), ProbeShape::kSglangPrompt);
  for (const char* e : {"vllm", "", "mock", "atom"}) {
    EXPECT_EQ(ProbeShapeFor(e), ProbeShape::kVllmChat) << e;
  }
  const json vllm = json::parse(ProbeRequestBody(ProbeShape::kVllmChat, "qwen", "ignored"));
  EXPECT_EQ(vllm["model"], "qwen");
  EXPECT_EQ(vllm["messages"], json::parse(ProbeMessagesJson()));
  EXPECT_EQ(vllm["add_generation_prompt"], true);
  EXPECT_EQ(vllm["add_special_tokens"], false);
  EXPECT_FALSE(vllm.contains("prompt"));
  const json sglang =
      json::parse(ProbeRequestBody(ProbeShape::kSglangPrompt, "qwen", "<|im_start|>user"));
  EXPECT_EQ(sglang, json::parse(R"({"model":"qwen","prompt":"<|im_start|>user",
                                    "add_special_tokens":false})"));
  // No model in the record: the engine's default model.
  EXPECT_FALSE(json::parse(ProbeRequestBody(ProbeShape::kVllmChat, "", "")).contains("model"));
}

TEST(RenderParityTest, ProbeConversationIsFixed) {
  const json messages = json::parse(ProbeMessagesJson());
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0]["role"], "system");
  EXPECT_EQ(messages[3]["role"], "user");
  EXPECT_EQ(json::parse(ProbeChatBody())["messages"], messages);
  EXPECT_EQ(ProbeMessagesJson(), ProbeMessagesJson());
}

}  // namespace
}  // namespace infera::router
