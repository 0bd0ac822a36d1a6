#include "discovery/disagg_meta.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "discovery/worker_record.h"
#include "nlohmann/json.hpp"

namespace infera::discovery {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

absl::StatusOr<WorkerRecord> ParseFields(const json& fields) {
  json obj = {{"url", "http://10.0.0.7:30000"}};
  obj.update(fields);
  return WorkerRecordFromJson(obj);
}

std::string ErrorOf(const absl::StatusOr<WorkerRecord>& r) {
  return r.ok() ? "ok" : std::string(r.status().message());
}

TEST(DisaggMetaTest, ProtocolNamesRoundTrip) {
  for (PdProtocol p : {PdProtocol::kNone, PdProtocol::kSglangBootstrap, PdProtocol::kVllmNixl,
                       PdProtocol::kVllmMooncake}) {
    auto back = ParsePdProtocol(PdProtocolName(p));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, p);
  }
  EXPECT_FALSE(ParsePdProtocol("mooncake").ok());
}

TEST(DisaggMetaTest, SglangPrefillDefaultsHostFromUrlAndPort8998) {
  auto r = ParseFields(
      {{"disagg_mode", "prefill"}, {"disagg_meta", {{"protocol", "sglang-bootstrap"}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pd_protocol, PdProtocol::kSglangBootstrap);
  EXPECT_EQ(r->pd.bootstrap_host, "10.0.0.7");
  EXPECT_EQ(r->pd.bootstrap_port, 8998u);
  // The defaults are written into the params, so the stored record is canonical.
  EXPECT_EQ(json::parse(r->disagg_params_json),
            json({{"bootstrap_host", "10.0.0.7"}, {"bootstrap_port", 8998}}));
  auto again = ParseWorkerRecord(SerializeWorkerRecord(*r));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *r);
}

TEST(DisaggMetaTest, SglangPrefillExplicitParams) {
  auto r =
      ParseFields({{"disagg_mode", "prefill"},
                   {"disagg_meta",
                    {{"protocol", "sglang-bootstrap"},
                     {"params", {{"bootstrap_host", "p0.internal"}, {"bootstrap_port", 30001}}}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pd.bootstrap_host, "p0.internal");
  EXPECT_EQ(r->pd.bootstrap_port, 30001u);
}

TEST(DisaggMetaTest, SglangDecodeNeedsNoParams) {
  auto r =
      ParseFields({{"disagg_mode", "decode"}, {"disagg_meta", {{"protocol", "sglang-bootstrap"}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pd, PdParams{});
  EXPECT_EQ(r->disagg_params_json, "{}");
}

TEST(DisaggMetaTest, MooncakePrefillDefaultsAddrAndNeedsEngineId) {
  auto r = ParseFields(
      {{"disagg_mode", "prefill"},
       {"disagg_meta", {{"protocol", "vllm-mooncake"}, {"params", {{"engine_id", "e0"}}}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pd.bootstrap_addr, "10.0.0.7:8998");
  EXPECT_EQ(r->pd.engine_id, "e0");
  auto explicit_addr =
      ParseFields({{"disagg_mode", "prefill"},
                   {"disagg_meta",
                    {{"protocol", "vllm-mooncake"},
                     {"params", {{"engine_id", "e1"}, {"bootstrap_addr", "10.0.0.9:9000"}}}}}});
  ASSERT_TRUE(explicit_addr.ok()) << explicit_addr.status();
  EXPECT_EQ(explicit_addr->pd.bootstrap_addr, "10.0.0.9:9000");
  EXPECT_THAT(ErrorOf(ParseFields(
                  {{"disagg_mode", "prefill"}, {"disagg_meta", {{"protocol", "vllm-mooncake"}}}})),
              HasSubstr("'disagg_meta.params.engine_id' is required"));
}

TEST(DisaggMetaTest, NixlNeedsNothingAndKeepsUnknownParams) {
  auto r = ParseFields({{"disagg_mode", "prefill"},
                        {"disagg_meta", {{"protocol", "vllm-nixl"}, {"params", {{"future", 1}}}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pd_protocol, PdProtocol::kVllmNixl);
  EXPECT_EQ(json::parse(r->disagg_params_json), json({{"future", 1}}));
}

TEST(DisaggMetaTest, MixedWorkerMayOmitProtocol) {
  auto r = ParseFields(json::object());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->pd_protocol, PdProtocol::kNone);
}

TEST(DisaggMetaTest, RejectsWithClearErrors) {
  EXPECT_THAT(ErrorOf(ParseFields({{"disagg_mode", "prefill"}})),
              HasSubstr("'disagg_meta.protocol' is required for a prefill worker"));
  EXPECT_THAT(
      ErrorOf(ParseFields({{"disagg_mode", "decode"}, {"disagg_meta", {{"protocol", ""}}}})),
      HasSubstr("required for a decode worker"));
  EXPECT_THAT(
      ErrorOf(ParseFields({{"disagg_mode", "prefill"}, {"disagg_meta", {{"protocol", "nccl"}}}})),
      HasSubstr("must be sglang-bootstrap, vllm-nixl or vllm-mooncake, got 'nccl'"));
  auto sglang = [](json params) {
    return ParseFields({{"disagg_mode", "prefill"},
                        {"disagg_meta", {{"protocol", "sglang-bootstrap"}, {"params", params}}}});
  };
  EXPECT_THAT(ErrorOf(sglang({{"bootstrap_port", 0}})),
              HasSubstr("bootstrap_port' must be an integer port"));
  EXPECT_THAT(ErrorOf(sglang({{"bootstrap_port", 70000}})), HasSubstr("1..65535"));
  EXPECT_THAT(ErrorOf(sglang({{"bootstrap_port", "8998"}})), HasSubstr("bootstrap_port"));
  EXPECT_THAT(ErrorOf(sglang({{"bootstrap_host", 5}})),
              HasSubstr("bootstrap_host' must be a string"));
  EXPECT_THAT(ErrorOf(sglang({{"bootstrap_host", "a b"}})), HasSubstr("no whitespace"));
  auto mooncake = [](json params) {
    return ParseFields({{"disagg_mode", "prefill"},
                        {"disagg_meta", {{"protocol", "vllm-mooncake"}, {"params", params}}}});
  };
  EXPECT_THAT(ErrorOf(mooncake({{"engine_id", "e"}, {"bootstrap_addr", "hostonly"}})),
              HasSubstr("bootstrap_addr' must be \"host:port\" with a port 1..65535"));
  EXPECT_THAT(ErrorOf(mooncake({{"engine_id", "e"}, {"bootstrap_addr", "h:0"}})),
              HasSubstr("port 1..65535"));
  EXPECT_THAT(ErrorOf(mooncake({{"engine_id", ""}})), HasSubstr("engine_id' must be non-empty"));
}

TEST(DisaggMetaTest, HostOfHostPort) {
  EXPECT_EQ(HostOfHostPort("10.0.0.1:80"), "10.0.0.1");
  EXPECT_EQ(HostOfHostPort("[::1]:80"), "[::1]");
  EXPECT_EQ(HostOfHostPort("h"), "h");
}

}  // namespace
}  // namespace infera::discovery
