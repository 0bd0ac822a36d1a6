#include "router/request/api_request.h"

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

TEST(ApiRequestTest, CacheSaltAsVllmChecksIt) {
  auto r = ParseApiRequest(
      ApiKind::kChat,
      R"({"model":"m","cache_salt":"s1","messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cache_salt, "s1");
  EXPECT_TRUE(r->has_cache_salt_key);
  auto n =
      ParseApiRequest(ApiKind::kCompletions, R"({"model":"m","prompt":[1],"cache_salt":null})");
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->cache_salt.has_value());
  EXPECT_TRUE(n->has_cache_salt_key);
  auto none = ParseApiRequest(ApiKind::kCompletions, R"({"model":"m","prompt":[1]})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_cache_salt_key);
  for (const char* bad : {R"({"model":"m","prompt":[1],"cache_salt":""})",
                          R"({"model":"m","prompt":[1],"cache_salt":5})",
                          R"({"model":"m","prompt":[1],"cache_salt":["s"]})"}) {
    auto b = ParseApiRequest(ApiKind::kCompletions, bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().message(),
              "Parameter 'cache_salt' must be a non-empty string if provided.");
  }
}

TEST(ApiRequestTest, CompletionsStringPromptIsKept) {
  auto r = ParseApiRequest(ApiKind::kCompletions, R"({"model":"m","prompt":"caf\u00e9 \"q\""})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_text, "caf\xc3\xa9 \"q\"");
  EXPECT_FALSE(r->prompt_tokens.has_value());
}

TEST(ApiRequestTest, CompletionsTopLevelImagesAreKeyedAsOnChat) {
  auto a = ParseApiRequest(ApiKind::kCompletions,
                           R"({"model":"m","prompt":"describe","images":["http://x/a.png"]})");
  auto b = ParseApiRequest(ApiKind::kCompletions,
                           R"({"model":"m","prompt":[1,2,3],"images":["http://x/b.png"]})");
  auto chat = ParseApiRequest(ApiKind::kChat,
                              R"({"model":"m","messages":[{"role":"user","content":"describe"}],
                                  "images":["http://x/a.png"]})");
  ASSERT_TRUE(a.ok() && b.ok() && chat.ok());
  ASSERT_EQ(a->image_keys.size(), 1u);
  ASSERT_EQ(b->image_keys.size(), 1u);
  EXPECT_NE(a->image_keys[0], b->image_keys[0]);
  EXPECT_EQ(a->image_keys, chat->image_keys);
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

// Values of the wrong type in /v1/messages are 400s naming the field (before, the
// translation to chat threw and the client got 500 with a leaked in-flight gauge).
TEST(ApiRequestTest, AnthropicFieldsOfTheWrongTypeAreClearErrors) {
  const std::string head = R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":[)";
  struct Case {
    std::string blocks;
    const char* message;
  } cases[] = {
      {R"({"type":5,"text":"x"})", "messages[0].content[0].type must be a string"},
      {R"({"type":"text","text":7})", "messages[0].content[0].text must be a string"},
      {R"({"type":"text"})", "messages[0].content[0].text is required"},
      {R"("plain")", "messages[0].content[0] must be an object"},
      {R"({"type":"tool_use","id":1,"name":"f","input":{}})", "content[0].id must be a string"},
      {R"({"type":"tool_use","id":"t","name":[],"input":{}})", "content[0].name must be a string"},
      {R"({"type":"tool_result","tool_use_id":{},"content":"r"})",
       "content[0].tool_use_id must be a string"},
      {R"({"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":1}]})",
       "content[0].content[0].text must be a string"},
      {R"({"type":"image","source":{"type":"base64","media_type":"image/png","data":5}})",
       "content[0].source.data must be a string"},
      {R"({"type":"image","source":"x"})", "content[0].source must be an object"},
  };
  for (const Case& c : cases) {
    const std::string body = head + c.blocks + "]}]}";
    auto r = ParseApiRequest(ApiKind::kMessages, body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << body << " -> " << r.status().message();
  }
  auto sys = ParseApiRequest(ApiKind::kMessages,
                             R"({"model":"m","max_tokens":8,"system":[{"type":"text","text":1}],
                                 "messages":[{"role":"user","content":"x"}]})");
  EXPECT_NE(sys.status().message().find("system[0].text must be a string"), std::string::npos)
      << sys.status();
  auto tools = ParseApiRequest(ApiKind::kMessages,
                               R"({"model":"m","max_tokens":8,"tools":[{"name":3}],
                                   "messages":[{"role":"user","content":"x"}]})");
  EXPECT_NE(tools.status().message().find("tools[0].name must be a string"), std::string::npos)
      << tools.status();
  auto ok = ParseApiRequest(
      ApiKind::kMessages,
      head + R"({"type":"text","text":"hi"},{"type":"image","source":{"type":"base64",)"
             R"("media_type":"image/png","data":"AAAA"}}]}]})");
  EXPECT_TRUE(ok.ok()) << ok.status();
}

// An integer beyond 64 bits is named as such, not "not valid JSON".
TEST(ApiRequestTest, NumberBeyond64BitsIsNamed) {
  for (ApiKind kind : {ApiKind::kChat, ApiKind::kMessages}) {
    auto r = ParseApiRequest(kind, R"({"model":"m","max_tokens":18446744073709551616,
                                       "messages":[{"role":"user","content":"x"}]})");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("out-of-range number"), std::string::npos) << r.status();
  }
  auto deep = ParseApiRequest(ApiKind::kChat, std::string(2000, '[') + std::string(2000, ']'));
  EXPECT_NE(deep.status().message().find("deeper than 1024"), std::string::npos) << deep.status();
}

}  // namespace
}  // namespace infera::router
