#include "discovery/worker_record.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace infera::discovery {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::string_view kFull = R"({
  "worker_id": "10.0.0.5:30000", "url": "http://10.0.0.5:30000",
  "model_name": "Qwen/Qwen3-0.6B", "engine": "sglang",
  "disagg_mode": "prefill",
  "disagg_meta": {"protocol": "sglang-bootstrap", "params": {"bootstrap_port": 8998}},
  "kv_events_endpoint": "tcp://10.0.0.5:5557",
  "kv_replay_endpoint": "tcp://10.0.0.5:5558",
  "kv_block_size": 32, "dp_rank": 2, "dp_size": 4, "num_gpu_blocks": 70000,
  "some_future_field": {"nested": [1, 2, 3]}
})";

TEST(WorkerRecordTest, ParsesEveryField) {
  auto r = ParseWorkerRecord(kFull);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->worker_id, "10.0.0.5:30000");
  EXPECT_EQ(r->url, "http://10.0.0.5:30000");
  EXPECT_EQ(r->model_name, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(r->engine, "sglang");
  EXPECT_EQ(r->disagg_mode, DisaggMode::kPrefill);
  EXPECT_EQ(r->disagg_protocol, "sglang-bootstrap");
  // The prefill worker's bootstrap_host defaults to the url's host (disagg_meta.h).
  EXPECT_EQ(nlohmann::json::parse(r->disagg_params_json),
            nlohmann::json({{"bootstrap_host", "10.0.0.5"}, {"bootstrap_port", 8998}}));
  EXPECT_EQ(r->kv_events_endpoint, "tcp://10.0.0.5:5557");
  EXPECT_EQ(r->kv_replay_endpoint, "tcp://10.0.0.5:5558");
  EXPECT_EQ(r->kv_block_size, 32u);
  EXPECT_EQ(r->dp_rank, 2u);
  EXPECT_EQ(r->dp_size, 4u);
  EXPECT_EQ(r->num_gpu_blocks, 70000u);
}

TEST(WorkerRecordTest, DefaultsWhenOptionalFieldsAbsentOrNull) {
  auto r = ParseWorkerRecord(R"({"url": "http://h:1", "kv_replay_endpoint": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->worker_id, "h:1");  // derived from the url
  EXPECT_EQ(r->engine, "vllm");
  EXPECT_EQ(r->disagg_mode, DisaggMode::kMixed);
  EXPECT_EQ(r->disagg_params_json, "{}");
  EXPECT_EQ(r->kv_block_size, 16u);
  EXPECT_EQ(r->dp_rank, 0u);
  EXPECT_EQ(r->dp_size, 1u);
  EXPECT_EQ(r->num_gpu_blocks, 0u);  // unknown
  EXPECT_TRUE(r->kv_replay_endpoint.empty());
  EXPECT_EQ(r->request_transport, "http");  // Infera's default
}

// Infera's request_transport: "nats" round-trips; "http" is the default and omitted.
TEST(WorkerRecordTest, RequestTransport) {
  auto r = ParseWorkerRecord(R"({"url": "http://h:1", "request_transport": "nats"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_transport, "nats");
  auto j = WorkerRecordToJson(*r);
  EXPECT_EQ(j["request_transport"], "nats");
  auto back = WorkerRecordFromJson(j);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *r);
  r->request_transport = "http";
  EXPECT_FALSE(WorkerRecordToJson(*r).contains("request_transport"));
}

TEST(WorkerRecordTest, RoundTrips) {
  auto r = ParseWorkerRecord(kFull);
  ASSERT_TRUE(r.ok());
  std::string text = SerializeWorkerRecord(*r);
  auto again = ParseWorkerRecord(text);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *r);
  // Exactly the §11 schema, with the optional replay endpoint present.
  auto j = nlohmann::json::parse(text);
  for (const char* key : {"worker_id", "url", "model_name", "engine", "disagg_mode", "disagg_meta",
                          "kv_events_endpoint", "kv_replay_endpoint", "kv_block_size", "dp_rank",
                          "dp_size", "num_gpu_blocks"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["disagg_meta"]["protocol"], "sglang-bootstrap");
  EXPECT_EQ(j["disagg_mode"], "prefill");
}

TEST(WorkerRecordTest, OmitsEmptyReplayEndpoint) {
  WorkerRecord r;
  r.worker_id = "a:1";
  r.url = "http://a:1";
  auto j = WorkerRecordToJson(r);
  EXPECT_FALSE(j.contains("kv_replay_endpoint"));
  auto back = WorkerRecordFromJson(j);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, r);
}

struct BadCase {
  std::string json;
  std::string message;
};

class WorkerRecordBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(WorkerRecordBadTest, RejectsWithClearError) {
  auto r = ParseWorkerRecord(GetParam().json);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, WorkerRecordBadTest,
    ::testing::Values(
        BadCase{"", "not valid JSON"}, BadCase{"{", "not valid JSON"},
        BadCase{"[]", "must be a JSON object"}, BadCase{"42", "must be a JSON object"},
        BadCase{"{}", "'url' is required"}, BadCase{R"({"url": 5})", "'url' must be a string"},
        BadCase{R"({"url": "https://h:1"})", "http://"},
        BadCase{R"({"url": "http://host"})", "http://host:port"},
        BadCase{R"({"url": "http://h:99999"})", "bad port"},
        BadCase{R"({"url": "http://h:x1"})", "bad port"},
        BadCase{R"({"url": "http://h:1", "worker_id": "a b"})", "'worker_id'"},
        BadCase{R"({"url": "http://h:1", "worker_id": "a\u0001b"})", "visible ASCII"},
        BadCase{R"({"url": "http://h:1", "worker_id": "a\u007fb"})", "visible ASCII"},
        BadCase{R"({"url": "http://h:1", "worker_id": "w\u00e9"})", "visible ASCII"},
        BadCase{R"({"url": "http://h:1", "worker_id": "a/b"})", "'worker_id'"},
        BadCase{R"({"url": "http://user:pw@h:1"})", "user info"},
        BadCase{R"({"url": "http://h:1@evil:2"})", "user info"},
        BadCase{R"({"url": "http://h:1", "engine": "trt"})", "'engine'"},
        BadCase{R"({"url": "http://h:1", "disagg_mode": "both"})", "'disagg_mode'"},
        BadCase{R"({"url": "http://h:1", "disagg_mode": 1})", "'disagg_mode' must be a string"},
        BadCase{R"({"url": "http://h:1", "disagg_meta": []})", "'disagg_meta' must be an object"},
        BadCase{R"({"url": "http://h:1", "disagg_meta": {"protocol": 1}})", "disagg_meta.protocol"},
        BadCase{R"({"url": "http://h:1", "disagg_meta": {"params": "x"}})", "disagg_meta.params"},
        BadCase{R"({"url": "http://h:1", "kv_events_endpoint": "h:5557"})", "tcp://"},
        BadCase{R"({"url": "http://h:1", "kv_replay_endpoint": 3})", "'kv_replay_endpoint'"},
        BadCase{R"({"url": "http://h:1", "kv_block_size": 0})", "must be positive"},
        BadCase{R"({"url": "http://h:1", "kv_block_size": -16})", "must not be negative"},
        BadCase{R"({"url": "http://h:1", "kv_block_size": 1.5})", "non-negative integer"},
        BadCase{R"({"url": "http://h:1", "kv_block_size": "16"})", "non-negative integer"},
        BadCase{R"({"url": "http://h:1", "kv_block_size": 1e30})", "non-negative integer"},
        BadCase{R"({"url": "http://h:1", "kv_block_size": 18446744073709551615})", "at most"},
        BadCase{R"({"url": "http://h:1", "dp_size": 0})", "must be positive"},
        BadCase{R"({"url": "http://h:1", "num_gpu_blocks": -1})", "must not be negative"},
        BadCase{R"({"url": "http://h:1", "num_gpu_blocks": 4294967295})", "at most"},
        BadCase{R"({"url": "http://h:1", "dp_rank": 4095, "dp_size": 2})", "dp_rank + dp_size"},
        BadCase{R"({"url": "http://h:1", "lora_adapters": "a"})", "'lora_adapters'"},
        BadCase{R"({"url": "http://h:1", "lora_adapters": ["a", ""]})", "non-empty strings"},
        BadCase{R"({"url": "http://h:1", "lora_adapters": [1]})", "non-empty strings"},
        BadCase{R"({"url": "http://h:1", "request_transport": "grpc"})", "'request_transport'"},
        BadCase{R"({"url": "http://h:1", "request_transport": 1})", "'request_transport'"}));

TEST(WorkerRecordTest, LoraAdaptersRoundTrip) {
  auto r = ParseWorkerRecord(R"({"url": "http://h:1", "lora_adapters": ["sql-lora", "b"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->lora_adapters, (std::vector<std::string>{"sql-lora", "b"}));
  EXPECT_EQ(*ParseWorkerRecord(SerializeWorkerRecord(*r)), *r);
  // Absent: none, and not written.
  auto none = ParseWorkerRecord(R"({"url": "http://h:1"})");
  EXPECT_TRUE(none->lora_adapters.empty());
  EXPECT_FALSE(WorkerRecordToJson(*none).contains("lora_adapters"));
}

TEST(WorkerRecordTest, RejectsOversizedText) {
  std::string big = R"({"url": "http://h:1", "pad": ")" + std::string(kMaxRecordBytes, 'x') + "\"}";
  auto r = ParseWorkerRecord(big);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("over the limit"));
}

TEST(WorkerRecordTest, SerialisesInvalidUtf8WithoutThrowing) {
  WorkerRecord r;
  r.worker_id = "a:1";
  r.url = "http://a:1";
  r.model_name = "bad\xff";
  std::string text = SerializeWorkerRecord(r);
  EXPECT_TRUE(ParseWorkerRecord(text).ok());
}

TEST(WorkerRecordTest, DisaggModeNames) {
  for (DisaggMode m : {DisaggMode::kMixed, DisaggMode::kPrefill, DisaggMode::kDecode}) {
    auto back = ParseDisaggMode(DisaggModeName(m));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, m);
  }
}

// A url's credentials never reach a log line or a client through an error message.
TEST(WorkerRecordTest, CredentialsInAUrlAreNotEchoed) {
  auto r = ParseWorkerRecord(R"({"url": "http://admin:s3cret@10.0.0.5:30000"})");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr("s3cret")));
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr("admin")));
}

// Found by discovery_parse_fuzz: a url host with a space parsed, and a prefill
// worker's default bootstrap host (the url's) then failed its own check on the
// record's second parse. Whitespace and control bytes in a url's host:port are errors.
TEST(WorkerRecordTest, RejectsWhitespaceInTheUrlHost) {
  for (const char* url : {"http://10. .0.5:30000", "http://10.0.0.5 :30000"}) {
    auto r = ParseWorkerRecord(std::string(R"({"url": ")") + url + R"(", "disagg_mode": "prefill",
        "disagg_meta": {"protocol": "sglang-bootstrap"}})");
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("whitespace or control")) << url;
  }
  EXPECT_FALSE(HostPortOfUrl("http://a\tb:1").ok());
  EXPECT_FALSE(HostPortOfUrl("http://a\x7f:1").ok());
  EXPECT_TRUE(HostPortOfUrl("http://10.0.0.5:30000/v1 x").ok());  // the path is not the host
}

}  // namespace
}  // namespace infera::discovery
