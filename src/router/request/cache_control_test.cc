#include "router/request/cache_control.h"

#include <gtest/gtest.h>

#include <string>

namespace infera::router {
namespace {

CacheRetention Parse(const std::string& json) {
  static simdjson::dom::parser parser;
  simdjson::dom::element doc;
  EXPECT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS) << json;
  return ParseCacheRetention(doc);
}

TEST(CacheControlTest, NoHintIsImplicitNone) {
  CacheRetention h = Parse(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(h.retention, Retention::kNone);
  EXPECT_FALSE(h.explicit_hint);
  EXPECT_EQ(RetentionWeightFactor(h), 1.0);
}

TEST(CacheControlTest, AnthropicBlocksTakeTheStrongest) {
  CacheRetention h = Parse(R"({
    "system": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    "messages": [{"role": "user", "content": [
      {"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}]}]})");
  EXPECT_EQ(h.retention, Retention::kLong);
  EXPECT_TRUE(h.explicit_hint);
  EXPECT_EQ(RetentionWeightFactor(h), 2.0);
  // ephemeral without ttl (Anthropic's 5 minutes), tools too.
  h = Parse(R"({"tools": [{"name": "t", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]})");
  EXPECT_EQ(h.retention, Retention::kShort);
  EXPECT_EQ(RetentionWeightFactor(h), 1.0);
  // A thinking block is never cached; another cache_control type says nothing.
  h = Parse(R"({"messages": [{"role": "assistant", "content": [
      {"type": "thinking", "thinking": "...", "cache_control": {"type": "ephemeral"}}]}]})");
  EXPECT_EQ(h.retention, Retention::kNone);
  EXPECT_TRUE(h.explicit_hint);
  EXPECT_DOUBLE_EQ(RetentionWeightFactor(h), 0.1);
  h = Parse(
      R"({"system": [{"type": "text", "text": "x", "cache_control": {"type": "persistent"}}]})");
  EXPECT_FALSE(h.explicit_hint);
  for (const char* ttl : {"1hr", "60m", "3600s", "LONG", " 1H "}) {
    EXPECT_EQ(Parse(std::string(R"({"system": [{"type": "text", "cache_control": {"type":
              "ephemeral", "ttl": ")") +
                    ttl + R"("}}]})")
                  .retention,
              Retention::kLong)
        << ttl;
  }
}

TEST(CacheControlTest, OpenAiRetentionAndKey) {
  CacheRetention h = Parse(R"({"prompt_cache_retention": "24h", "prompt_cache_key": "s"})");
  EXPECT_EQ(h.retention, Retention::kLong);
  h = Parse(R"({"prompt_cache_key": "sess"})");  // a key alone: implicit short
  EXPECT_EQ(h.retention, Retention::kShort);
  EXPECT_TRUE(h.explicit_hint);
  h = Parse(R"({"prompt_cache_retention": "Disabled"})");
  EXPECT_EQ(h.retention, Retention::kNone);
  EXPECT_DOUBLE_EQ(RetentionWeightFactor(h), 0.1);
  h = Parse(R"({"prompt_cache_retention": "forever"})");  // unknown: no hint
  EXPECT_FALSE(h.explicit_hint);
  // Both shapes: the strongest wins.
  h = Parse(R"({"prompt_cache_retention": "none", "messages": [{"role": "user", "content": [
      {"type": "text", "text": "y", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]})");
  EXPECT_EQ(h.retention, Retention::kLong);
}

TEST(CacheControlTest, MalformedShapesAreNoHint) {
  for (const char* body : {R"([])", R"({"system": "text"})", R"({"messages": [1, "x", null]})",
                           R"({"messages": [{"content": [{"cache_control": 5}]}]})",
                           R"({"prompt_cache_retention": 7})", R"({"prompt_cache_key": null})"}) {
    CacheRetention h = Parse(body);
    EXPECT_EQ(h.retention, Retention::kNone) << body;
    EXPECT_EQ(RetentionWeightFactor(h), 1.0) << body;
  }
}

TEST(CacheControlTest, MetricsRenderEveryRetention) {
  CacheControlMetrics m;
  m.CountPick({Retention::kLong, true}, /*multimodal=*/false);
  m.CountPick({Retention::kNone, false}, /*multimodal=*/true);
  std::string out;
  m.Render(out);
  EXPECT_NE(out.find("infera_cache_control_seen_total{retention=\"long\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("infera_cache_control_seen_total{retention=\"short\"} 0\n"),
            std::string::npos);
  EXPECT_NE(out.find("infera_cache_locality_skipped_total{reason=\"multimodal\"} 1\n"),
            std::string::npos);
}

}  // namespace
}  // namespace infera::router
