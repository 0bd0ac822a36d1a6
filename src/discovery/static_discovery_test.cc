#include "discovery/static_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace infera::discovery {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const absl::Status& s) { return std::string(s.message()); }

TEST(WorkerFlagTest, UrlOnly) {
  auto r = ParseWorkerFlag("http://10.0.0.5:30000");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->worker_id, "10.0.0.5:30000");
  EXPECT_EQ(r->url, "http://10.0.0.5:30000");
}

TEST(WorkerFlagTest, AllKeys) {
  auto r = ParseWorkerFlag(
      "http://h:8000,worker_id=w1,model_name=Qwen/Qwen3-0.6B,engine=mock,disagg_mode=decode,"
      "disagg_protocol=vllm-nixl,kv_events_endpoint=tcp://h:5557,kv_replay_endpoint=tcp://h:5558,"
      "kv_block_size=64,dp_rank=1,dp_size=2");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->worker_id, "w1");
  EXPECT_EQ(r->model_name, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(r->engine, "mock");
  EXPECT_EQ(r->disagg_mode, DisaggMode::kDecode);
  EXPECT_EQ(r->disagg_protocol, "vllm-nixl");
  EXPECT_EQ(r->kv_events_endpoint, "tcp://h:5557");
  EXPECT_EQ(r->kv_replay_endpoint, "tcp://h:5558");
  EXPECT_EQ(r->kv_block_size, 64u);
  EXPECT_EQ(r->dp_rank, 1u);
  EXPECT_EQ(r->dp_size, 2u);
}

TEST(WorkerFlagTest, LoraAdaptersAreSemicolonSeparated) {
  auto r = ParseWorkerFlag("http://h:8000,model_name=m,lora_adapters=sql-lora;chat-lora");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->lora_adapters, (std::vector<std::string>{"sql-lora", "chat-lora"}));
  EXPECT_FALSE(ParseWorkerFlag("http://h:8000,lora_adapters=a;;b").ok());
}

TEST(WorkerFlagTest, DisaggParamsKeys) {
  auto r = ParseWorkerFlag(
      "http://h:8000,disagg_mode=prefill,disagg_protocol=sglang-bootstrap,bootstrap_host=b,"
      "bootstrap_port=9000");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pd.bootstrap_host, "b");
  EXPECT_EQ(r->pd.bootstrap_port, 9000u);
  auto m = ParseWorkerFlag(
      "http://h:8000,disagg_mode=prefill,disagg_protocol=vllm-mooncake,engine_id=e0,"
      "bootstrap_addr=h:8998");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->pd.bootstrap_addr, "h:8998");
  EXPECT_EQ(m->pd.engine_id, "e0");
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,disagg_mode=prefill").status()),
              HasSubstr("disagg_meta.protocol' is required"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,bootstrap_port=x").status()),
              HasSubstr("'bootstrap_port' must be a port number"));
}

TEST(WorkerFlagTest, ModelIsShortForModelName) {
  auto r = ParseWorkerFlag("http://h:1,model=Qwen/Qwen3-0.6B");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model_name, "Qwen/Qwen3-0.6B");
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,model=a,model_name=b").status()),
              HasSubstr("given twice"));
  EXPECT_THAT(WorkerFlagHelp(), HasSubstr("model_name (or model)"));
}

TEST(WorkerFlagTest, Errors) {
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("").status()), HasSubstr("expected URL"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("h:1").status()), HasSubstr("http://"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,model_name").status()),
              HasSubstr("expected key=value"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,=x").status()), HasSubstr("expected key=value"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,colour=red").status()),
              HasSubstr("unknown key 'colour'"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,dp_size=2,dp_size=3").status()),
              HasSubstr("given twice"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,dp_size=-1").status()),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,dp_size=").status()),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,kv_block_size=99999999999999999999").status()),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(ErrorOf(ParseWorkerFlag("http://h:1,engine=trt").status()), HasSubstr("engine"));
}

TEST(WorkersListTest, ParsesList) {
  auto list = ParseWorkersList(R"([
    {"url": "http://a:1", "model_name": "m"},
    {"worker_id": "b:2", "url": "http://b:2", "dp_size": 2, "extra": true}
  ])");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].worker_id, "a:1");
  EXPECT_EQ((*list)[1].dp_size, 2u);
  EXPECT_TRUE(ParseWorkersList("[]").ok());
}

TEST(WorkersListTest, Errors) {
  EXPECT_THAT(ErrorOf(ParseWorkersList("{}").status()), HasSubstr("JSON array"));
  EXPECT_THAT(ErrorOf(ParseWorkersList("[").status()), HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf(ParseWorkersList(R"([{"url":"http://a:1"}, {"url": 3}])").status()),
              HasSubstr("[1]"));
  EXPECT_THAT(ErrorOf(ParseWorkersList(R"([{"url":"http://a:1"}, {"url":"http://a:1"}])").status()),
              HasSubstr("duplicate worker_id 'a:1'"));
}

TEST(WorkersFileTest, LoadsFileAndReportsMissing) {
  std::string path = ::testing::TempDir() + "/workers_file_test.json";
  {
    std::ofstream out(path);
    out << R"([{"url": "http://a:1"}])";
  }
  auto list = LoadWorkersFile(path);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 1u);
  std::remove(path.c_str());
  auto missing = LoadWorkersFile(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(StaticDiscoveryTest, ReportsEachRecordOnce) {
  auto a = ParseWorkerFlag("http://a:1");
  auto b = ParseWorkerFlag("http://b:2");
  ASSERT_TRUE(a.ok() && b.ok());
  StaticDiscovery discovery({*a, *b});
  std::vector<std::string> added;
  DiscoveryCallbacks callbacks;
  callbacks.on_added = [&](const WorkerRecord& r) { added.push_back(r.worker_id); };
  ASSERT_TRUE(discovery.Start(callbacks).ok());
  discovery.Stop();
  EXPECT_EQ(added, (std::vector<std::string>{"a:1", "b:2"}));
}

TEST(StaticDiscoveryTest, RejectsDuplicates) {
  auto a = ParseWorkerFlag("http://a:1");
  ASSERT_TRUE(a.ok());
  StaticDiscovery discovery({*a, *a});
  int added = 0;
  DiscoveryCallbacks callbacks;
  callbacks.on_added = [&](const WorkerRecord&) { ++added; };
  EXPECT_FALSE(discovery.Start(callbacks).ok());
  EXPECT_EQ(added, 0);
}

}  // namespace
}  // namespace infera::discovery
