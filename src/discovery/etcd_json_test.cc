#include "discovery/etcd_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace infera::discovery {
namespace {

using ::testing::HasSubstr;

// Messages below are verbatim answers of Debian's etcd 3.4.23 gateway.
constexpr std::string_view kRange =
    R"({"header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"2","raft_term":"2"},"kvs":[{"key":"L2luZmVyYS93b3JrZXJzL2E=","create_revision":"2","mod_revision":"2","version":"1","value":"eyJ4IjoxfQ==","lease":"4111120336062457095"}],"count":"1"})";
constexpr std::string_view kEmptyRange =
    R"({"header":{"cluster_id":"1","member_id":"2","revision":"5","raft_term":"2"}})";
constexpr std::string_view kWatchCreated =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"2","raft_term":"2"},"created":true}})";
constexpr std::string_view kWatchPut =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"3","raft_term":"2"},"events":[{"kv":{"key":"L2luZmVyYS93b3JrZXJzL2I=","create_revision":"3","mod_revision":"3","version":"1","value":"eyJ5IjoxfQ=="}}]}})";
constexpr std::string_view kWatchDelete =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"4","raft_term":"2"},"events":[{"type":"DELETE","kv":{"key":"L2luZmVyYS93b3JrZXJzL2I=","mod_revision":"4"}}]}})";
constexpr std::string_view kWatchCompacted =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","raft_term":"2"},"canceled":true,"compact_revision":"4"}})";
constexpr std::string_view kKeepAlive =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"2","raft_term":"2"},"ID":"4111120336062457095","TTL":"5"}})";
constexpr std::string_view kKeepAliveUnknown =
    R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"2","raft_term":"2"},"ID":"123"}})";
constexpr std::string_view kGrant =
    R"({"header":{"cluster_id":"1","member_id":"2","revision":"1","raft_term":"2"},"ID":"4111120336062457093","TTL":"5"})";
constexpr std::string_view kLeaseNotFound =
    R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})";

TEST(EtcdJsonTest, PrefixRangeEnd) {
  EXPECT_EQ(PrefixRangeEnd("/infera/workers/"), "/infera/workers0");
  EXPECT_EQ(PrefixRangeEnd("a\xff"), "b");
  EXPECT_EQ(PrefixRangeEnd("\xff\xff"), std::string(1, '\0'));
  EXPECT_EQ(PrefixRangeEnd(""), std::string(1, '\0'));
}

TEST(EtcdJsonTest, RequestBodiesUseBase64AndStringIntegers) {
  auto put = nlohmann::json::parse(PutRequest("/k", "v", 4111120336062457095));
  EXPECT_EQ(put["key"], "L2s=");
  EXPECT_EQ(put["value"], "dg==");
  EXPECT_EQ(put["lease"], "4111120336062457095");
  EXPECT_FALSE(nlohmann::json::parse(PutRequest("/k", "v", 0)).contains("lease"));
  auto watch = nlohmann::json::parse(WatchPrefixRequest("/infera/workers/", 7));
  EXPECT_EQ(watch["create_request"]["key"], "L2luZmVyYS93b3JrZXJzLw==");
  EXPECT_EQ(watch["create_request"]["range_end"], "L2luZmVyYS93b3JrZXJzMA==");
  EXPECT_EQ(watch["create_request"]["start_revision"], "7");
  EXPECT_EQ(nlohmann::json::parse(LeaseGrantRequest(30))["TTL"], "30");
  EXPECT_EQ(nlohmann::json::parse(LeaseIdRequest(-5))["ID"], "-5");
}

TEST(EtcdJsonTest, ParsesRange) {
  auto r = ParseRangeResponse(kRange);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->revision, 2);
  ASSERT_EQ(r->kvs.size(), 1u);
  EXPECT_EQ(r->kvs[0].key, "/infera/workers/a");
  EXPECT_EQ(r->kvs[0].value, R"({"x":1})");
  EXPECT_EQ(r->kvs[0].mod_revision, 2);
  EXPECT_EQ(r->kvs[0].lease_id, 4111120336062457095);
  auto empty = ParseRangeResponse(kEmptyRange);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->revision, 5);
  EXPECT_TRUE(empty->kvs.empty());
}

TEST(EtcdJsonTest, ParsesWatchMessages) {
  auto created = ParseWatchMessage(kWatchCreated);
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(created->created);
  EXPECT_TRUE(created->events.empty());

  auto put = ParseWatchMessage(kWatchPut);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->revision, 3);
  ASSERT_EQ(put->events.size(), 1u);
  EXPECT_EQ(put->events[0].type, EtcdWatchEvent::Type::kPut);
  EXPECT_EQ(put->events[0].kv.key, "/infera/workers/b");
  EXPECT_EQ(put->events[0].kv.value, R"({"y":1})");

  auto del = ParseWatchMessage(kWatchDelete);
  ASSERT_TRUE(del.ok());
  ASSERT_EQ(del->events.size(), 1u);
  EXPECT_EQ(del->events[0].type, EtcdWatchEvent::Type::kDelete);
  EXPECT_EQ(del->events[0].kv.mod_revision, 4);

  auto compacted = ParseWatchMessage(kWatchCompacted);
  ASSERT_TRUE(compacted.ok());
  EXPECT_TRUE(compacted->canceled);
  EXPECT_EQ(compacted->compact_revision, 4);
}

TEST(EtcdJsonTest, ParsesLeases) {
  auto grant = ParseLeaseGrantResponse(kGrant);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->id, 4111120336062457093);
  EXPECT_EQ(grant->ttl_s, 5);
  auto alive = ParseKeepAliveMessage(kKeepAlive);
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(alive->ttl_s, 5);
  auto gone = ParseKeepAliveMessage(kKeepAliveUnknown);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->ttl_s, 0);
}

TEST(EtcdJsonTest, GatewayErrors) {
  absl::Status s = GatewayError(404, kLeaseNotFound);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("lease not found"));
  EXPECT_EQ(GatewayError(503, "<html>").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(GatewayError(404, "").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(GatewayError(400, R"({"code": 99, "message": "x"})").code(),
            absl::StatusCode::kUnknown);
  auto watch_error = ParseWatchMessage(R"({"error":{"grpc_code":14,"message":"gone"}})");
  EXPECT_EQ(watch_error.status().code(), absl::StatusCode::kUnavailable);
}

TEST(EtcdJsonTest, RejectsMalformedAnswers) {
  for (std::string_view bad : {"", "[]", "{", R"({"kvs":[]})", R"({"header":{"revision":"x"}})",
                               R"({"header":{"revision":"1"},"kvs":{}})",
                               R"({"header":{"revision":"1"},"kvs":[{"key":"!!"}]})",
                               R"({"header":{"revision":"1"},"kvs":[{"key":5}]})",
                               R"({"header":{"revision":"99999999999999999999"}})"}) {
    EXPECT_FALSE(ParseRangeResponse(bad).ok()) << bad;
  }
  for (std::string_view bad :
       {"{}", R"({"result":[]})", R"({"result":{"events":{}}})", R"({"result":{"events":[1]}})",
        R"({"result":{"events":[{"type":"MOVE","kv":{}}]}})", R"({"result":{"events":[{}]}})"}) {
    EXPECT_FALSE(ParseWatchMessage(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseLeaseGrantResponse(R"({"header":{}})").ok());
  EXPECT_EQ(ParseLeaseGrantResponse(kLeaseNotFound).status().code(), absl::StatusCode::kNotFound);
}

TEST(JsonObjectSplitterTest, SplitsAcrossArbitraryChunks) {
  std::string stream = std::string(kWatchCreated) + "\n" + std::string(kWatchPut) + "\n" +
                       R"({"result":{"s":"a}\"{b"}})" + "\n";
  for (size_t step : {1u, 2u, 7u, 64u, 100000u}) {
    JsonObjectSplitter splitter(1 << 20);
    std::vector<std::string> out;
    for (size_t i = 0; i < stream.size(); i += step) {
      ASSERT_TRUE(splitter.Feed(std::string_view(stream).substr(i, step), &out).ok());
    }
    ASSERT_EQ(out.size(), 3u) << step;
    EXPECT_EQ(out[0], kWatchCreated);
    EXPECT_EQ(out[1], kWatchPut);
    EXPECT_EQ(out[2], R"({"result":{"s":"a}\"{b"}})");
  }
}

TEST(JsonObjectSplitterTest, BoundsObjectSize) {
  JsonObjectSplitter splitter(16);
  std::vector<std::string> out;
  EXPECT_EQ(splitter.Feed(R"({"a":"0123456789abcdef"})", &out).code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace infera::discovery
