#include "template/chat_template.h"

#include <gtest/gtest.h>

#include <cstring>

namespace infera::chat {
namespace {

ChatTemplate MustLoad(const nlohmann::ordered_json& config) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromConfig(config.dump(), std::nullopt);
  EXPECT_TRUE(chat.ok()) << chat.status();
  return std::move(*chat);
}

TEST(ChatTemplateTest, BuildsTheContextVllmPasses) {
  ChatTemplate chat = MustLoad({
      {"bos_token", {{"content", "<s>"}, {"special", true}}},
      {"eos_token", "</s>"},
      {"pad_token", nullptr},
      {"add_bos_token", true},
      {"chat_template",
       "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ tools }}|{{ documents }}|"
       "{{ add_generation_prompt }}|{{ enable_thinking | default('unset') }}|"
       "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"},
  });
  absl::StatusOr<std::string> out =
      chat.RenderJson(R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<s>|</s>|False|None|None|True|unset|user:hi;");

  out = chat.RenderJson(R"({"messages": [], "add_generation_prompt": false, "tools": [],
                            "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<s>|</s>|False|[]|None|False|False|");
}

TEST(ChatTemplateTest, TextPartsAreJoinedForStringFormatTemplates) {
  // A Qwen 3-like template reads content only when it is a string.
  ChatTemplate string_format =
      MustLoad({{"chat_template",
                 "{% for m in messages %}{% if m.content is string %}[{{ m.content }}]{% else %}"
                 "(not a string){% endif %}{% endfor %}"}});
  absl::StatusOr<std::string> out = string_format.RenderJson(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                     {"type": "text", "text": "b"}]},
                       {"role": "assistant", "content": "c"},
                       {"role": "user", "content": [{"type": "document", "source":
                                                     {"url": "http://x/d.pdf"}}]}]})");
  ASSERT_TRUE(out.ok()) << out.status();
  // Text parts joined with a newline; a list with a part that is neither text nor a
  // medium is passed unchanged.
  EXPECT_EQ(*out, "[a\nb][c](not a string)");
  // A template that loops over the content (vLLM's "openai" format) gets the list.
  ChatTemplate openai_format =
      MustLoad({{"chat_template",
                 "{% for m in messages %}{% for p in m['content'] %}<{{ p.text }}>{% endfor %}"
                 "{% endfor %}"}});
  out = openai_format.RenderJson(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                     {"type": "text", "text": "b"}]}]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<a><b>");
}

TEST(ChatTemplateTest, MultimodalPartsBecomePlaceholdersAsVllmFlattensThem) {
  const char* kTemplate =
      "{% for m in messages %}{% if m.content is string %}[{{ m.content }}]{% else %}"
      "(not a string){% endif %}{% endfor %}";
  ChatTemplate generic = MustLoad({{"chat_template", kTemplate}});
  // Missing placeholders go first, one a line, by order of first appearance; the texts
  // follow, joined with a newline; a placeholder the text already holds is not added.
  absl::StatusOr<std::string> out = generic.RenderJson(
      R"({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "compare"},
            {"type": "image_url", "image_url": {"url": "http://x/1.png"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            {"type": "image", "source": {"type": "url", "url": "http://x/2.png"}},
            {"type": "text", "text": "and <audio> here"}]},
          {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "v"}}]}]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[<image>\n<image>\ncompare\nand <audio> here][<video>\n]");

  // A tokenizer with Qwen-VL's added tokens gets Qwen-VL's placeholders.
  nlohmann::ordered_json qwen = {
      {"chat_template", kTemplate},
      {"added_tokens_decoder",
       {{"151652", {{"content", "<|vision_start|>"}}},
        {"151653", {{"content", "<|vision_end|>"}}},
        {"151655", {{"content", "<|image_pad|>"}}},
        {"151656", {{"content", "<|video_pad|>"}}}}}};
  ChatTemplate qwen_vl = MustLoad(qwen);
  EXPECT_EQ(qwen_vl.placeholders().image, "<|vision_start|><|image_pad|><|vision_end|>");
  EXPECT_EQ(qwen_vl.placeholders().audio, "<audio>");
  out = qwen_vl.RenderJson(R"({"messages": [{"role": "user", "content": [
      {"type": "image_url", "image_url": {"url": "http://x/1.png"}},
      {"type": "text", "text": "what is it?"}]}]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[<|vision_start|><|image_pad|><|vision_end|>\nwhat is it?]");
}

TEST(ChatTemplateTest, KeepsRequestKeyOrderForTojson) {
  ChatTemplate chat = MustLoad({{"chat_template", "{{ tools | tojson }}"}});
  absl::StatusOr<std::string> out =
      chat.RenderJson(R"({"messages": [], "tools": [{"z": 1, "a": {"y": "\u00e9", "b": 2.50}}]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[{\"z\": 1, \"a\": {\"y\": \"\xc3\xa9\", \"b\": 2.5}}]");
}

TEST(ChatTemplateTest, NamedTemplatesPickToolUseWhenToolsAreGiven) {
  ChatTemplate chat = MustLoad({{"chat_template",
                                 {{{"name", "default"}, {"template", "default"}},
                                  {{"name", "tool_use"}, {"template", "tools"}},
                                  {{"name", "rag"}, {"template", "{% broken"}}}}});
  EXPECT_EQ(*chat.RenderJson(R"({"messages": []})"), "default");
  EXPECT_EQ(*chat.RenderJson(R"({"messages": [], "tools": null})"), "default");
  EXPECT_EQ(*chat.RenderJson(R"({"messages": [], "tools": [{"type": "function"}]})"), "tools");
}

TEST(ChatTemplateTest, JinjaFileTakesPrecedence) {
  absl::StatusOr<ChatTemplate> chat =
      ChatTemplate::FromConfig(R"({"chat_template": "config"})", std::string("file\n"));
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*chat->RenderJson(R"({"messages": []})"), "file");
}

TEST(ChatTemplateTest, BadConfigsAndRequestsAreClearErrors) {
  EXPECT_FALSE(ChatTemplate::FromConfig("not json", std::nullopt).ok());
  EXPECT_FALSE(ChatTemplate::FromConfig("{}", std::nullopt).ok());
  EXPECT_FALSE(ChatTemplate::FromConfig(R"({"chat_template": 5})", std::nullopt).ok());
  absl::StatusOr<ChatTemplate> bad =
      ChatTemplate::FromConfig(R"({"chat_template": "{% if %}"})", std::nullopt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("syntax error"), std::string::npos) << bad.status();

  ChatTemplate chat = MustLoad({{"chat_template", "{{ raise_exception('no system role') }}"}});
  EXPECT_EQ(chat.RenderJson("{").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chat.RenderJson("[]").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chat.RenderJson(R"({"messages": {}})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chat.RenderJson(R"({"messages": [], "add_generation_prompt": "yes"})").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status raised = chat.RenderJson(R"({"messages": []})").status();
  EXPECT_EQ(raised.message(), "template raised: no system role");
}

TEST(ChatTemplateTest, NowFeedsStrftimeNow) {
  ChatTemplate chat = MustLoad({{"chat_template", "{{ strftime_now('%d %B %Y, %A') }}"}});
  absl::StatusOr<std::tm> now = ParseIsoTime("2024-07-26T10:00:00Z");
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(*chat.RenderJson(R"({"messages": []})", *now), "26 July 2024, Friday");
  EXPECT_FALSE(ParseIsoTime("26/07/2024").ok());
  EXPECT_FALSE(ParseIsoTime("2024-13-01").ok());
  EXPECT_TRUE(ParseIsoTime("2024-07-26").ok());
  EXPECT_TRUE(ParseIsoTime("2024-07-26T10:00:00.123+02:00").ok());
}

TEST(ChatTemplateTest, RepeatedKeysKeepFirstPositionAndLastValueLikePython) {
  ChatTemplate chat = MustLoad({{"chat_template", "{{ tools | tojson }}"}});
  // json.loads('{"a": 1, "b": 2, "a": 3}') == {"a": 3, "b": 2}
  absl::StatusOr<std::string> out =
      chat.RenderJson(R"({"messages": [], "tools": [{"a": 1, "b": 2, "a": 3}]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, R"([{"a": 3, "b": 2}])");
  // The same with more keys than the linear scan handles.
  std::string body = R"({"messages": [], "tools": [{)";
  for (int i = 0; i < 40; ++i)
    body += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
  body += R"("k3": "last"}]})";
  out = chat.RenderJson(body);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(out->find(R"("k2": 2, "k3": "last", "k4": 4)"), std::string::npos) << *out;
  EXPECT_EQ(out->find(R"("k3": 3)"), std::string::npos);
}

TEST(ChatTemplateTest, RenderDomEqualsRenderJson) {
  ChatTemplate chat = MustLoad({{"chat_template",
                                 "{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}"
                                 "{{ tools | tojson }}"}});
  const char* body = R"({"messages": [{"role": "user", "content": "caf\u00e9"}],
                         "tools": [{"z": 1, "a": [true, null, 2.5]}]})";
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(body, std::strlen(body)).get(doc), simdjson::SUCCESS);
  absl::StatusOr<std::string> from_dom = chat.RenderDom(doc);
  absl::StatusOr<std::string> from_text = chat.RenderJson(body);
  ASSERT_TRUE(from_dom.ok()) << from_dom.status();
  ASSERT_TRUE(from_text.ok()) << from_text.status();
  EXPECT_EQ(*from_dom, *from_text);
  EXPECT_EQ(*from_dom, "user=caf\xc3\xa9;[{\"z\": 1, \"a\": [true, null, 2.5]}]");
}

TEST(ChatTemplateTest, BodiesSimdjsonRefusesStillRender) {
  ChatTemplate chat = MustLoad({{"chat_template", "{{ tools[0] }}|{{ messages | length }}"}});
  // An integer beyond 64 bits: simdjson refuses it, the nlohmann path renders it.
  absl::StatusOr<std::string> out =
      chat.RenderJson(R"({"messages": [], "tools": [123456789012345678901234567890]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->substr(out->size() - 2), "|0");
  EXPECT_FALSE(chat.RenderJson(R"({"messages": [)").ok());
  EXPECT_FALSE(chat.RenderJson("{\"messages\": [\"\xff\"]}").ok());
  EXPECT_FALSE(chat.RenderJson(R"({"tools": []})").ok());
}

// A body nested 50,000+ levels deep is an error, not a stack overflow (the recursive
// dump and conversion of nlohmann values crashed infera-mock-engine --tokenizer).
TEST(ChatTemplateTest, DeeplyNestedBodyIsAnErrorNotACrash) {
  ChatTemplate chat = MustLoad({{"chat_template", "{{ messages | length }}"}});
  const size_t depth = 100'000;
  const std::string text = R"({"messages": [{"role": "user", "content": )" +
                           std::string(depth, '[') + std::string(depth, ']') + "}]}";
  for (int ordered = 0; ordered < 2; ++ordered) {
    absl::Status st = ordered ? chat.Render(nlohmann::ordered_json::parse(text)).status()
                              : chat.Render(nlohmann::json::parse(text)).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("nests deeper than 1024 levels"), std::string::npos) << st;
  }
  EXPECT_EQ(chat.RenderJson(text).status().code(), absl::StatusCode::kInvalidArgument);
  // 1000 levels still render.
  const std::string ok = R"({"messages": [{"role": "user", "content": )" + std::string(1000, '[') +
                         std::string(1000, ']') + "}]}";
  EXPECT_TRUE(chat.Render(nlohmann::json::parse(ok)).ok());
}

}  // namespace
}  // namespace infera::chat
