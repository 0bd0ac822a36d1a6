#include "router/dispatch/pd/leg_bodies.h"

#include <gtest/gtest.h>

namespace infera::pd {
namespace {

using nlohmann::json;

json Client() {
  return json::parse(R"({"model": "m", "prompt": "hi", "max_tokens": 50, "stream": true,
    "stream_options": {"include_usage": true}, "min_tokens": 5, "temperature": 0.5})");
}

TEST(LegBodiesTest, SglangAddsTheBootstrapFieldsToTheSameBody) {
  json leg = SglangLegBody(Client(), "10.0.0.5", 8998, (uint64_t{1} << 63) - 1);
  json want = Client();
  want["bootstrap_host"] = "10.0.0.5";
  want["bootstrap_port"] = 8998;
  want["bootstrap_room"] = (uint64_t{1} << 63) - 1;
  EXPECT_EQ(leg, want);
}

TEST(LegBodiesTest, NixlPrefillIsTheExactRewrite) {
  json want = json::parse(R"({"model": "m", "prompt": "hi", "max_tokens": 1, "stream": false,
    "temperature": 0.5, "kv_transfer_params": {"do_remote_decode": true,
    "do_remote_prefill": false, "remote_engine_id": null, "remote_block_ids": null,
    "remote_host": null, "remote_port": null}})");
  EXPECT_EQ(NixlPrefillBody(Client()), want);
  json chat = json::parse(R"({"messages": [], "max_completion_tokens": 9,
    "min_completion_tokens": 2})");
  json out = NixlPrefillBody(chat);
  EXPECT_EQ(out["max_completion_tokens"], 1);
  EXPECT_EQ(out["max_tokens"], 1);
  EXPECT_FALSE(out.contains("min_completion_tokens"));
}

TEST(LegBodiesTest, NixlDecodeCopiesThePrefillsKvTransferParams) {
  const json prefill = json::parse(R"({"id": "cmpl-1", "choices": [], "kv_transfer_params":
    {"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": [1, 2, 3],
     "remote_engine_id": "e-1", "remote_host": "10.0.0.5", "remote_port": 5600,
     "tp_size": 1, "future_field": {"x": [1.5, "\u00e9"]}}})");
  auto decode = NixlDecodeBody(Client(), prefill);
  ASSERT_TRUE(decode.ok()) << decode.status();
  json want = Client();  // stream, stream_options, min_tokens and max_tokens as the client sent
  want["kv_transfer_params"] = prefill["kv_transfer_params"];
  EXPECT_EQ(*decode, want);
  for (const char* bad : {R"({"choices": []})", R"({"kv_transfer_params": {}})",
                          R"({"kv_transfer_params": null})", "[]"}) {
    auto r = NixlDecodeBody(Client(), json::parse(bad));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << bad;
  }
}

TEST(LegBodiesTest, MooncakeLegs) {
  EXPECT_EQ(MooncakeTransferId("req-7"), "xfer-req-7");
  json pre = MooncakePrefillBody(Client(), "xfer-req-7");
  EXPECT_EQ(pre["kv_transfer_params"],
            json::parse(R"({"do_remote_decode": true, "do_remote_prefill": false,
              "transfer_id": "xfer-req-7"})"));
  EXPECT_EQ(pre["max_tokens"], 1);
  EXPECT_EQ(pre["stream"], false);
  EXPECT_FALSE(pre.contains("stream_options"));
  json dec = MooncakeDecodeBody(Client(), "xfer-req-7", "10.0.0.5:8998", "engine-0");
  json want = Client();
  want["max_tokens"] = 49;
  want["kv_transfer_params"] = json::parse(R"({"do_remote_decode": false,
    "do_remote_prefill": true, "remote_bootstrap_addr": "http://10.0.0.5:8998",
    "remote_engine_id": "engine-0", "transfer_id": "xfer-req-7"})");
  EXPECT_EQ(dec, want);
  json one = json::parse(R"({"max_tokens": 1, "max_completion_tokens": 3})");
  json d1 = MooncakeDecodeBody(one, "t", "h:1", "e");
  EXPECT_EQ(d1["max_tokens"], 1);  // never below 1
  EXPECT_EQ(d1["max_completion_tokens"], 2);
}

}  // namespace
}  // namespace infera::pd
