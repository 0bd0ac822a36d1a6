#include "router/request/anthropic.h"

#include <gtest/gtest.h>

#include "router/request/anthropic_stream.h"

namespace infera::router {
namespace {

using nlohmann::json;

TEST(AnthropicTest, RequestToChat) {
  json in = json::parse(R"({"model":"m","max_tokens":5,"system":"be brief","stream":true,
    "stop_sequences":["X"],
    "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},
                {"role":"assistant","content":"hello"}]})");
  json out = AnthropicToChat(in);
  EXPECT_EQ(out["messages"][0], json({{"role", "system"}, {"content", "be brief"}}));
  EXPECT_EQ(out["messages"][1], json({{"role", "user"}, {"content", "hi"}}));
  EXPECT_EQ(out["messages"][2]["content"], "hello");
  EXPECT_EQ(out["max_tokens"], 5);
  EXPECT_EQ(out["stop"], json::array({"X"}));
  EXPECT_EQ(out["stream_options"]["include_usage"], true);
}

TEST(AnthropicTest, ResponseToMessage) {
  json chat = json::parse(R"({"choices":[{"message":{"role":"assistant","content":"ok"},
    "finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2}})");
  json msg = ChatResponseToAnthropic(chat, "m", "r1");
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["id"], "msg_r1");
  EXPECT_EQ(msg["content"][0]["text"], "ok");
  EXPECT_EQ(msg["stop_reason"], "max_tokens");
  EXPECT_EQ(msg["usage"]["input_tokens"], 3);
  EXPECT_EQ(msg["usage"]["output_tokens"], 2);
}

TEST(AnthropicTest, StreamTranslation) {
  AnthropicStreamTranslator t("m", "r1");
  std::string out = t.Feed(
      "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"He\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\ndata: "
      "{\"choices\":[{\"delta\":{},");
  out += t.Feed(
      "\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":"
      "{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n");
  out += t.Finish();
  std::vector<std::string> types;
  SseParser p;
  for (const std::string& d : p.Feed(out)) types.push_back(json::parse(d)["type"]);
  EXPECT_EQ(types,
            (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                      "content_block_delta", "content_block_stop", "message_delta",
                                      "message_stop"}));
  EXPECT_NE(out.find("\"output_tokens\":2"), std::string::npos);
  EXPECT_NE(out.find("\"stop_reason\":\"end_turn\""), std::string::npos);
}

TEST(AnthropicTest, ErrorShape) {
  json e = json::parse(AnthropicErrorBody(413, "too big"));
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "request_too_large");
  EXPECT_EQ(e["error"]["message"], "too big");
}

// Bytes that are not UTF-8 (a request id header, a raw path) and upstream values of
// the wrong type never throw out of the translation (before: nlohmann's dump threw
// type_error 316 and the handler ended without an answer: 500, leaked gauge).
TEST(AnthropicTest, InvalidUtf8AndWrongTypesDoNotThrow) {
  json e = json::parse(AnthropicErrorBody(404, "no route for GET /\xff"));
  EXPECT_EQ(e["error"]["type"], "not_found_error");
  AnthropicStreamTranslator t("m", "id-\xff");
  std::string out = t.Feed(
      "data: {\"choices\":[{\"delta\":{\"content\":\"hi\",\"tool_calls\":[{\"id\":\"c\","
      "\"function\":{\"name\":5,\"arguments\":7}}]},\"finish_reason\":3}],"
      "\"usage\":{\"prompt_tokens\":\"x\",\"completion_tokens\":-1}}\n\n"
      "data: {\"error\":{\"message\":5}}\n\n");
  out += t.Finish();
  EXPECT_NE(out.find("message_start"), std::string::npos);
  EXPECT_NE(out.find("upstream error"), std::string::npos);
  EXPECT_NE(out.find("message_stop"), std::string::npos);
  json chat = json::parse(R"({"choices":[{"finish_reason":1,"message":{"content":"x",
      "tool_calls":[{"id":2,"function":{"name":[],"arguments":{}}}]}}],
      "usage":{"prompt_tokens":"3","completion_tokens":4}})");
  json msg = ChatResponseToAnthropic(chat, "m", "r");
  EXPECT_EQ(msg["usage"]["input_tokens"], 0);
  EXPECT_EQ(msg["usage"]["output_tokens"], 4);
  EXPECT_EQ(msg["content"][1]["id"], "");
}

}  // namespace
}  // namespace infera::router
