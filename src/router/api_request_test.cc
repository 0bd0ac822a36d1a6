#include "router/api_request.h"

#include <gtest/gtest.h>

namespace infera::router {
namespace {

TEST(ApiRequestTest, ChatEstimateSkipsDataUrls) {
  auto r = ParseApiRequest(ApiKind::kChat, R"({"model":"m","stream":true,"messages":[
    {"role":"user","content":[{"type":"text","text":"0123456789abcdef"},
     {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAAAAAAAAAAAAAAAAAAAAAA"}}]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  // "user" (4) + "text" (4) + 16 + "image_url" type (9) = 33 bytes -> 8 tokens.
  EXPECT_EQ(r->estimated_tokens, 8u);
  EXPECT_EQ(r->image_keys.size(), 1u);
  EXPECT_FALSE(r->prompt_tokens.has_value());
}

TEST(ApiRequestTest, CompletionsIntegerPrompt) {
  auto r = ParseApiRequest(ApiKind::kCompletions, R"({"model":"m","prompt":[1,2,3,4]})");
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->prompt_tokens.has_value());
  EXPECT_EQ(*r->prompt_tokens, (std::vector<core::TokenId>{1, 2, 3, 4}));
  auto s = ParseApiRequest(ApiKind::kCompletions, R"({"model":"m","prompt":"abcdefgh"})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->estimated_tokens, 2u);
}

TEST(ApiRequestTest, RejectsBadInputWithClearMessages) {
  struct Case {
    ApiKind kind;
    const char* body;
    const char* message;
  } cases[] = {
      {ApiKind::kChat, "{not json", "not valid JSON"},
      {ApiKind::kChat, "[1]", "must be a JSON object"},
      {ApiKind::kChat, R"({"messages":[]})", "'model' is required"},
      {ApiKind::kChat, R"({"model":1,"messages":[]})", "'model' must be a string"},
      {ApiKind::kChat, R"({"model":"m","messages":"hi"})", "'messages' must be an array"},
      {ApiKind::kChat, R"({"model":"m","messages":[{"content":"x"}]})", "role must be a string"},
      {ApiKind::kChat, R"({"model":"m","stream":"yes","messages":[{"role":"user"}]})",
       "'stream' must be a boolean"},
      {ApiKind::kCompletions, R"({"model":"m","prompt":[1,-2]})", "non-negative"},
      {ApiKind::kCompletions, R"({"model":"m","prompt":{}})", "'prompt' must be"},
      {ApiKind::kMessages, R"({"model":"m","messages":[{"role":"user","content":"x"}]})",
       "'max_tokens' is required"},
  };
  for (const Case& c : cases) {
    auto r = ParseApiRequest(c.kind, c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << c.body << " -> " << r.status().message();
  }
}

TEST(ApiRequestTest, RepeatedKeyCountsWithItsLastValueLikePython) {
  auto r = ParseApiRequest(ApiKind::kChat,
                           R"({"model":"a","model":"b","stream":false,"stream":true,
                               "messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "b");
  EXPECT_TRUE(r->stream);
}

TEST(ApiRequestTest, CompletionsStringPromptIsKept) {
  auto r = ParseApiRequest(ApiKind::kCompletions, R"({"model":"m","prompt":"caf\u00e9 \"q\""})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_text, "caf\xc3\xa9 \"q\"");
  EXPECT_FALSE(r->prompt_tokens.has_value());
}

TEST(ApiRequestTest, AnthropicBodyIsParsedForTranslation) {
  auto r = ParseApiRequest(ApiKind::kMessages,
                           R"({"model":"m","max_tokens":8,"system":"be brief",
                               "messages":[{"role":"user","content":"hello"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->body.is_object());
  EXPECT_EQ(r->body["system"], "be brief");
}

TEST(ApiRequestTest, RejectsInvalidUtf8AndTruncatedBodies) {
  std::string bad = "{\"model\":\"m\xff\",\"messages\":[{\"role\":\"user\"}]}";
  EXPECT_FALSE(ParseApiRequest(ApiKind::kChat, bad).ok());
  EXPECT_FALSE(ParseApiRequest(ApiKind::kChat, R"({"model":"m","messages":[)").ok());
  EXPECT_FALSE(ParseApiRequest(ApiKind::kChat, "").ok());
  EXPECT_FALSE(ParseApiRequest(ApiKind::kChat, std::string(100000, '[')).ok());
}

TEST(ApiRequestTest, LargeBodyUsesItsOwnParser) {
  std::string content(5 << 20, 'a');  // above the per-thread parser's keep limit
  std::string body = R"({"model":"m","messages":[{"role":"user","content":")" + content + R"("}]})";
  auto r = ParseApiRequest(ApiKind::kChat, body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->estimated_tokens, (content.size() + 4) / 4);
  auto small = ParseApiRequest(ApiKind::kChat, R"({"model":"m","messages":[{"role":"user"}]})");
  EXPECT_TRUE(small.ok());
}

TEST(ApiRequestTest, HandsOutTheParseForReuse) {
  std::optional<simdjson::dom::element> dom;
  auto r = ParseApiRequest(ApiKind::kChat,
                           R"({"model":"m","messages":[{"role":"user","content":"hi"}]})", &dom);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(dom.has_value());
  std::string_view model;
  ASSERT_EQ((*dom)["model"].get(model), simdjson::SUCCESS);
  EXPECT_EQ(model, "m");
  // Invalid JSON hands out nothing; a body above the per-thread parser's limit neither.
  std::optional<simdjson::dom::element> none;
  EXPECT_FALSE(ParseApiRequest(ApiKind::kChat, "{", &none).ok());
  EXPECT_FALSE(none.has_value());
  std::string big = R"({"model":"m","messages":[{"role":"user","content":")" +
                    std::string(5 << 20, 'a') + R"("}]})";
  EXPECT_TRUE(ParseApiRequest(ApiKind::kChat, big, &none).ok());
  EXPECT_FALSE(none.has_value());
}

}  // namespace
}  // namespace infera::router
