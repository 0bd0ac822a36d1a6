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

}  // namespace
}  // namespace infera::router
