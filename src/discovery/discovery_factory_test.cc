#include "discovery/discovery_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "discovery/etcd_discovery.h"

namespace infera::discovery {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> StartStatic(Discovery& d) {
  std::vector<std::string> ids;
  DiscoveryCallbacks c;
  c.on_added = [&](const WorkerRecord& r) { ids.push_back(r.worker_id); };
  EXPECT_TRUE(d.Start(c).ok());
  d.Stop();
  return ids;
}

TEST(DiscoveryFactoryTest, StaticFromFlagsAndFile) {
  std::string path = ::testing::TempDir() + "/factory_workers.json";
  {
    std::ofstream out(path);
    out << R"([{"url": "http://a:1"}])";
  }
  DiscoveryConfig config;
  config.worker_flags = {"http://b:2,model_name=m"};
  config.workers_file = path;
  auto d = CreateDiscovery(config);  // auto backend: static
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(StartStatic(**d), (std::vector<std::string>{"a:1", "b:2"}));
}

TEST(DiscoveryFactoryTest, Errors) {
  DiscoveryConfig dup;
  dup.worker_flags = {"http://b:2", "http://b:2"};
  EXPECT_THAT(std::string(CreateDiscovery(dup).status().message()), HasSubstr("given twice"));

  DiscoveryConfig bad_flag;
  bad_flag.worker_flags = {"http://b:2,nope=1"};
  EXPECT_THAT(std::string(CreateDiscovery(bad_flag).status().message()), HasSubstr("nope"));

  DiscoveryConfig missing_file;
  missing_file.workers_file = "/nonexistent/workers.json";
  EXPECT_THAT(std::string(CreateDiscovery(missing_file).status().message()),
              HasSubstr("--workers-file"));

  DiscoveryConfig mixed;
  mixed.backend = "etcd";
  mixed.worker_flags = {"http://b:2"};
  EXPECT_FALSE(CreateDiscovery(mixed).ok());

  DiscoveryConfig bad_endpoint;
  bad_endpoint.backend = "etcd";
  bad_endpoint.etcd_endpoint = "no-port";
  EXPECT_THAT(std::string(CreateDiscovery(bad_endpoint).status().message()),
              HasSubstr("--etcd-endpoint"));

  DiscoveryConfig k8s;
  k8s.backend = "kubernetes";
  k8s.getenv = [](const char*) -> const char* { return nullptr; };  // not in a Pod
  EXPECT_THAT(CreateDiscovery(k8s).status().message(), HasSubstr("--k8s-label-selector"));
  k8s.k8s_label_selector = "app=vllm";
  EXPECT_THAT(CreateDiscovery(k8s).status().message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  k8s.k8s_token_file = "/tmp/t";
  EXPECT_THAT(CreateDiscovery(k8s).status().message(), HasSubstr("go with --k8s-api-server"));
  k8s.k8s_api_server = "ftp://x";
  EXPECT_THAT(CreateDiscovery(k8s).status().message(), HasSubstr("https://host[:port]"));
  k8s.k8s_api_server = "http://127.0.0.1:6443";
  k8s.k8s_namespace = "ns";
  EXPECT_TRUE(CreateDiscovery(k8s).ok());
  k8s.backend = "k8s";  // Infera's name only
  EXPECT_EQ(CreateDiscovery(k8s).status().code(), absl::StatusCode::kInvalidArgument);

  DiscoveryConfig unknown;
  unknown.backend = "consul";
  EXPECT_EQ(CreateDiscovery(unknown).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DiscoveryFactoryTest, EtcdByDefaultWithoutWorkers) {
  auto d = CreateDiscovery(DiscoveryConfig{});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NE(dynamic_cast<EtcdDiscovery*>(d->get()), nullptr);
}

}  // namespace
}  // namespace infera::discovery
