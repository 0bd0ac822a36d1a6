#include "router/dispatch/usage_probe.h"

#include <gtest/gtest.h>

namespace infera::router {
namespace {

TEST(UsageProbeTest, ReadsCachedTokensFromAWholeBody) {
  UsageProbe p;
  p.Whole(R"({"choices":[],"usage":{"prompt_tokens":90,"prompt_tokens_details":)"
          R"({"cached_tokens": 64}}})");
  EXPECT_EQ(p.cached_tokens(), 64u);
}

TEST(UsageProbeTest, ReadsTheUsageChunkOfAStreamSplitAnywhere) {
  const std::string stream =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cached_tokens\"}}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":90,"
      "\"prompt_tokens_details\":{\"cached_tokens\":80}}}\r\n\r\n"
      "data: [DONE]\n\n";
  for (size_t cut = 0; cut <= stream.size(); cut += 7) {
    UsageProbe p;
    p.Chunk(stream.substr(0, cut));
    p.Chunk(stream.substr(cut));
    EXPECT_EQ(p.cached_tokens(), 80u) << cut;
  }
}

TEST(UsageProbeTest, ContinuousUsageKeepsTheLastReport) {
  UsageProbe p;
  p.Chunk(R"(data: {"usage":{"prompt_tokens_details":{"cached_tokens":16}}})"
          "\n\n"
          R"(data: {"usage":{"prompt_tokens_details":{"cached_tokens":32}}})"
          "\n\n");
  EXPECT_EQ(p.cached_tokens(), 32u);
}

TEST(UsageProbeTest, NoFieldOrABadOneIsNoReport) {
  for (const char* body :
       {R"({"usage":{"prompt_tokens":9}})", R"({"usage":{"prompt_tokens_details":null}})",
        R"({"usage":{"prompt_tokens_details":{"cached_tokens":-3}}})",
        R"({"usage":{"prompt_tokens_details":{"cached_tokens":"7"}}})",
        R"({"error":{"message":"cached_tokens"}})", "not json \"cached_tokens\"", ""}) {
    UsageProbe p;
    p.Whole(body);
    EXPECT_FALSE(p.cached_tokens().has_value()) << body;
  }
  UsageProbe s;
  s.Chunk("data: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":5}}}");  // unfinished
  EXPECT_FALSE(s.cached_tokens().has_value());
}

// A body relayed in pieces: only its tail is kept, and the usage object near its end
// is found there, wherever the pieces are cut and however large the body is.
TEST(UsageProbeTest, ReadsUsageFromTheTailOfAStreamedBody) {
  const std::string head = R"({"id":"x","choices":[{"message":{"content":")";
  const std::string text(3 * UsageProbe::kTailBytes, 'a');
  const std::string tail =
      R"("}, "note": ""usage": {"x": {"cached_tokens": 1}}"}],)"
      R"( "usage": {"prompt_tokens": 90, "prompt_tokens_details": {"cached_tokens": 48}},)"
      R"( "kv_transfer_params": null})";
  const std::string body = head + text + tail;
  for (size_t step : {size_t{1000}, size_t{8192}, size_t{70000}, body.size()}) {
    UsageProbe p;
    for (size_t at = 0; at < body.size(); at += step)
      p.BodyPiece(std::string_view(body).substr(at, step));
    p.FinishBody();
    EXPECT_EQ(p.cached_tokens(), 48u) << step;
  }
  UsageProbe none;
  none.BodyPiece(head + text + R"("}}]})");
  none.FinishBody();
  EXPECT_FALSE(none.cached_tokens().has_value());
}

}  // namespace
}  // namespace infera::router
