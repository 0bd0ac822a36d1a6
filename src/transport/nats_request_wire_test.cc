#include "transport/nats_request_wire.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace infera::transport {
namespace {

using nlohmann::json;

// The values Infera pins in rust/router/src/nats_request.rs (taken from its Python
// `_token`): a router and a worker that disagree never meet on a subject.
TEST(NatsRequestWire, SubjectsMatchInfera) {
  EXPECT_EQ(WorkerToken("10.0.0.1:8080"), "MTAuMC4wLjE6ODA4MA");
  EXPECT_EQ(WorkerToken("host.example.com:8000"), "aG9zdC5leGFtcGxlLmNvbTo4MDAw");
  EXPECT_EQ(WorkerToken("[::1]:8080"), "Wzo6MV06ODA4MA");
  EXPECT_EQ(RequestSubject("10.0.0.1:8080"), "infera.req.MTAuMC4wLjE6ODA4MA");
  EXPECT_EQ(CancelSubject("10.0.0.1:8080"), "infera.cancel.MTAuMC4wLjE6ODA4MA");
}

TEST(NatsRequestWire, EncodeEmbedsTheBodyAndReadsStream) {
  http::Headers h;
  h.Add("Content-Type", "application/json");
  h.Add("X-Infera-Request-Id", "r-1");
  h.Add("X-Data-Parallel-Rank", "2");
  const std::string body =
      R"({"model":"m","stream":true,"messages":[{"role":"user","content":"\"hi\""}]})";
  auto enc = EncodeRequest("POST", "/v1/chat/completions", h, body);
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_TRUE(enc->stream);
  json j = json::parse(enc->payload);
  EXPECT_EQ(j["path"], "/v1/chat/completions");
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["headers"], json({{"X-Infera-Request-Id", "r-1"}, {"X-Data-Parallel-Rank", "2"}}));
  EXPECT_EQ(j["body"], json::parse(body));
  EXPECT_FALSE(j.contains("method"));  // POST: Infera's envelope exactly

  auto plain = EncodeRequest("POST", "/v1/completions", {}, R"({"prompt":"x"})");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->stream);
  EXPECT_TRUE(json::parse(plain->payload)["headers"].is_null());
  auto get = EncodeRequest("GET", "/health", {}, "{}");
  ASSERT_TRUE(get.ok());
  EXPECT_EQ(json::parse(get->payload)["method"], "GET");
}

TEST(NatsRequestWire, EncodeRefusesABodyThatIsNotAnObject) {
  EXPECT_FALSE(EncodeRequest("POST", "/v1/completions", {}, "[1]").ok());
  EXPECT_FALSE(EncodeRequest("POST", "/v1/completions", {}, R"({"a":)").ok());
  EXPECT_FALSE(EncodeRequest("POST", "/v1/completions", {}, "").ok());
  EXPECT_FALSE(EncodeRequest("", "/v1/completions", {}, "{}").ok());
}

TEST(NatsRequestWire, DecodeRoundTripsWhatEncodeBuilds) {
  http::Headers h;
  h.Add("Authorization", "Bearer k");
  auto enc = EncodeRequest("POST", "/v1/completions", h, R"({"prompt":"p","stream":false})");
  ASSERT_TRUE(enc.ok());
  auto dec = DecodeRequest(enc->payload);
  ASSERT_TRUE(dec.ok()) << dec.status();
  EXPECT_EQ(dec->method, "POST");
  EXPECT_EQ(dec->path, "/v1/completions");
  EXPECT_FALSE(dec->stream);
  EXPECT_EQ(dec->headers.Get("Authorization"), "Bearer k");
  EXPECT_EQ(json::parse(dec->body), json::parse(R"({"prompt":"p","stream":false})"));
}

// What Infera's routers publish: headers null, a "migratable" we do not use.
TEST(NatsRequestWire, DecodeReadsInferasEnvelope) {
  auto dec = DecodeRequest(
      R"({"path":"/v1/chat/completions","stream":true,"headers":null,"body":{"model":"m"},"migratable":false})");
  ASSERT_TRUE(dec.ok()) << dec.status();
  EXPECT_TRUE(dec->stream);
  EXPECT_TRUE(dec->headers.fields().empty());
  EXPECT_EQ(dec->body, R"({"model":"m"})");
  auto no_body = DecodeRequest(R"({"path":"/abort_request"})");
  ASSERT_TRUE(no_body.ok());
  EXPECT_EQ(no_body->body, "{}");
}

TEST(NatsRequestWire, DecodeRefusesHostileEnvelopes) {
  for (const char* bad :
       {"", "nope", "[]", R"({"stream":true})", R"({"path":5})", R"({"path":"v1"})",
        R"({"path":"/a b"})", "{\"path\":\"/a\\r\\nX: y\"}", R"({"path":"/a","stream":"yes"})",
        R"({"path":"/a","headers":[1]})", R"({"path":"/a","headers":{"X":1}})",
        "{\"path\":\"/a\",\"headers\":{\"X\":\"a\\r\\nInjected: 1\"}}",
        R"({"path":"/a","headers":{"Bad Name":"v"}})", R"({"path":"/a","body":"text"})",
        R"({"path":"/a","method":"DELETE"})"}) {
    EXPECT_FALSE(DecodeRequest(bad).ok()) << bad;
  }
  std::string long_path = R"({"path":"/)" + std::string(3000, 'a') + R"("})";
  EXPECT_FALSE(DecodeRequest(long_path).ok());
  // Fields the worker's HTTP client writes itself are dropped, not forwarded.
  auto dec =
      DecodeRequest(R"({"path":"/a","headers":{"Content-Length":"999","Host":"evil","X-Ok":"1"}})");
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(dec->headers.fields().size(), 1u);
  EXPECT_EQ(dec->headers.Get("X-Ok"), "1");
}

TEST(NatsRequestWire, FrameTypesAndStatusAsInferaReadsThem) {
  EXPECT_EQ(ParseFrameType(nullptr), FrameType::kData);
  EXPECT_EQ(ParseFrameType("data"), FrameType::kData);
  EXPECT_EQ(ParseFrameType("something-new"), FrameType::kData);
  EXPECT_EQ(ParseFrameType("done"), FrameType::kDone);
  EXPECT_EQ(ParseFrameType("error"), FrameType::kError);
  EXPECT_EQ(ParseStatus("200"), 200);
  EXPECT_EQ(ParseStatus("503"), 503);
  EXPECT_EQ(ParseStatus(nullptr), std::nullopt);
  EXPECT_EQ(ParseStatus("20x"), std::nullopt);
  EXPECT_EQ(ParseStatus("99"), std::nullopt);
  EXPECT_EQ(ParseStatus("600"), std::nullopt);
  EXPECT_EQ(ParseStatus(""), std::nullopt);
}

// Flag > environment > default, as Infera resolves them; bad text is an error here.
TEST(NatsRequestWire, TimeoutsFromFlagOrEnvironment) {
  EXPECT_EQ(*TimeoutMs(std::nullopt, nullptr, 900, "--f", "ENV"), 900'000);
  EXPECT_EQ(*TimeoutMs(std::nullopt, "", 900, "--f", "ENV"), 900'000);
  EXPECT_EQ(*TimeoutMs(std::nullopt, "2.5", 900, "--f", "ENV"), 2'500);
  EXPECT_EQ(*TimeoutMs(1.0, "2.5", 900, "--f", "ENV"), 1'000);
  EXPECT_EQ(*TimeoutMs(0.0, nullptr, 900, "--f", "ENV"), 0);
  auto bad_env = TimeoutMs(std::nullopt, "15m", 900, "--f", "ENV");
  ASSERT_FALSE(bad_env.ok());
  EXPECT_NE(bad_env.status().message().find("ENV"), std::string_view::npos);
  auto negative = TimeoutMs(-1.0, nullptr, 900, "--f", "ENV");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("--f"), std::string_view::npos);
  EXPECT_FALSE(TimeoutMs(std::nullopt, "nan", 900, "--f", "ENV").ok());
  EXPECT_FALSE(TimeoutMs(1e12, nullptr, 900, "--f", "ENV").ok());
}

TEST(NatsRequestWire, SseBoundaryFindsEventEnds) {
  {
    SseBoundary b;
    EXPECT_EQ(b.Scan("data: a\n\ndata: b"), 9u);
    EXPECT_EQ(b.Scan("c\n"), std::string_view::npos);
    EXPECT_EQ(b.Scan("\n"), 1u);
  }
  {
    SseBoundary b;  // CRLF, the blank line's CRLF split across pieces
    EXPECT_EQ(b.Scan("data: a\r\n\r"), 10u);
    EXPECT_EQ(b.Scan("\ndata: b\r\n\r\n"), 12u);
  }
  {
    SseBoundary b;  // a CRLF split after a non-blank line is no event end
    EXPECT_EQ(b.Scan("data: a\r"), std::string_view::npos);
    EXPECT_EQ(b.Scan("\n"), std::string_view::npos);
    EXPECT_EQ(b.Scan("\r\n"), 2u);
  }
  {
    SseBoundary b;  // CR alone ends lines; two events in one piece: the last end
    EXPECT_EQ(b.Scan("data: a\r\rdata: b\n\ndata: c"), 18u);
  }
  {
    SseBoundary b;
    EXPECT_EQ(b.Scan("data: [DONE]\n\n"), 14u);
    EXPECT_EQ(b.Scan(""), std::string_view::npos);
  }
}

}  // namespace
}  // namespace infera::transport
