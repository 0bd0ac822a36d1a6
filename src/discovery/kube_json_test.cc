#include "discovery/kube_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "discovery/kube_client.h"

namespace infera::discovery {
namespace {

using ::testing::HasSubstr;

// The shape of a real `GET /api/v1/namespaces/ns/pods?labelSelector=app%3Dvllm` answer
// (fields discovery does not read trimmed).
constexpr char kPodList[] = R"({
  "kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "4711"},
  "items": [
    {"metadata": {"name": "vllm-0", "namespace": "ns", "uid": "u0", "resourceVersion": "4700",
                  "labels": {"app": "vllm"},
                  "annotations": {"infera.amd.com/worker-info":
                                  "{\"url\": \"http://10.0.0.5:30000\"}"}},
     "spec": {"containers": [{"name": "engine", "image": "vllm"}]},
     "status": {"phase": "Running", "podIP": "10.0.0.5"}},
    {"metadata": {"name": "vllm-1", "resourceVersion": "4705",
                  "deletionTimestamp": "2026-08-04T03:00:00Z", "deletionGracePeriodSeconds": 30,
                  "annotations": {"infera.amd.com/worker-info": "{}"}},
     "status": {"phase": "Running"}},
    {"metadata": {"name": "vllm-2", "resourceVersion": "4706"}, "status": {"phase": "Pending"}}
  ]})";

TEST(KubeJsonTest, PodListKeepsWhatDiscoveryReads) {
  auto list = ParsePodList(kPodList);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->resource_version, "4711");
  ASSERT_EQ(list->pods.size(), 3u);
  EXPECT_EQ(list->pods[0].name, "vllm-0");
  EXPECT_EQ(list->pods[0].resource_version, "4700");
  EXPECT_EQ(*list->pods[0].worker_info, R"({"url": "http://10.0.0.5:30000"})");
  EXPECT_TRUE(list->pods[0].Routable());
  EXPECT_TRUE(list->pods[1].terminating);
  EXPECT_FALSE(list->pods[1].Routable());  // being deleted: out at once
  EXPECT_FALSE(list->pods[2].Routable());  // not Running, no annotation
  auto empty =
      ParsePodList(R"({"kind":"PodList","metadata":{"resourceVersion":"9"},"items":null})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->pods.empty());
}

TEST(KubeJsonTest, WatchEvents) {
  auto added = ParseWatchEvent(
      R"({"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"12"},
         "status":{"phase":"Running"}}})");
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->type, KubeEventType::kAdded);
  EXPECT_EQ(added->pod.resource_version, "12");
  EXPECT_FALSE(added->pod.worker_info.has_value());
  auto bookmark = ParseWatchEvent(
      R"({"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1",
         "metadata":{"resourceVersion":"15","annotations":{"k8s.io/initial-events-end":"true"}}}})");
  ASSERT_TRUE(bookmark.ok());
  EXPECT_EQ(bookmark->type, KubeEventType::kBookmark);
  EXPECT_EQ(bookmark->pod.resource_version, "15");
  // What the API server sends for a watch from a compacted resourceVersion.
  auto gone = ParseWatchEvent(
      R"js({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},
         "status":"Failure","message":"too old resource version: 3 (12)","reason":"Expired",
         "code":410}})js");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->type, KubeEventType::kError);
  EXPECT_EQ(gone->error_code, 410);
  EXPECT_EQ(gone->error_message, "too old resource version: 3 (12)");
  EXPECT_EQ(ParseWatchEvent(R"({"type":"DELETED","object":{"metadata":{"name":"p"}}})")->type,
            KubeEventType::kDeleted);
}

TEST(KubeJsonTest, MalformedInputIsNamed) {
  EXPECT_THAT(ParsePodList("[").status().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(ParsePodList(R"({"items": 3})").status().message(), HasSubstr("'items'"));
  EXPECT_THAT(ParsePodList(R"({"items": [{"status": {}}]})").status().message(),
              HasSubstr("no metadata"));
  EXPECT_THAT(ParseWatchEvent(R"({"type":"ADDED"})").status().message(), HasSubstr("no object"));
  EXPECT_THAT(ParseWatchEvent(R"({"type":"RENAMED","object":{}})").status().message(),
              HasSubstr("unknown watch event type"));
  // An annotation that is not a string is no annotation.
  auto odd = ParseWatchEvent(
      R"({"type":"ADDED","object":{"metadata":{"name":"p","annotations":
         {"infera.amd.com/worker-info": 5}},"status":{"phase":"Running"}}})");
  ASSERT_TRUE(odd.ok());
  EXPECT_FALSE(odd->pod.Routable());
}

TEST(KubeJsonTest, MergePatchAndStatus) {
  EXPECT_EQ(AnnotationMergePatch(kWorkerInfoAnnotation, std::string(R"({"a":1})")),
            R"({"metadata":{"annotations":{"infera.amd.com/worker-info":"{\"a\":1}"}}})");
  EXPECT_EQ(AnnotationMergePatch(kWorkerInfoAnnotation, std::nullopt),
            R"({"metadata":{"annotations":{"infera.amd.com/worker-info":null}}})");
  EXPECT_EQ(KubeStatusMessage(R"({"kind":"Status","message":"pods \"x\" not found","code":404})"),
            R"(pods "x" not found)");
  EXPECT_EQ(KubeStatusMessage("plain text"), "plain text");
}

TEST(KubeClientTest, ServerUrls) {
  for (const char* good : {"https://10.96.0.1:443", "http://127.0.0.1:8080/", "https://[::1]:6443",
                           "https://kubernetes.default.svc"}) {
    KubeClientOptions o;
    o.api_server = good;
    EXPECT_TRUE(KubeClient::Create(o).ok()) << good;
  }
  for (const char* bad : {"10.96.0.1:443", "https://", "https://h:x", "https://h/path"}) {
    KubeClientOptions o;
    o.api_server = bad;
    EXPECT_FALSE(KubeClient::Create(o).ok()) << bad;
  }
}

TEST(KubeClientTest, InClusterNeedsThePodEnvironment) {
  auto none = KubeClientOptions::InCluster("/nonexistent", [](const char*) { return nullptr; });
  EXPECT_THAT(none.status().message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  auto no_token = KubeClientOptions::InCluster("/nonexistent", [](const char* n) -> const char* {
    return std::string(n) == "KUBERNETES_SERVICE_HOST" ? "10.96.0.1" : nullptr;
  });
  EXPECT_THAT(no_token.status().message(), HasSubstr("/nonexistent/token"));
  EXPECT_EQ(InClusterNamespace("/nonexistent"), "default");
}

}  // namespace
}  // namespace infera::discovery
