#include "http/url.h"

#include <gtest/gtest.h>

namespace infera::http {
namespace {

TEST(ParseHttpUrlTest, HostPortPath) {
  auto ep = ParseHttpUrl("http://10.0.0.5:30000/api/");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->host, "10.0.0.5");
  EXPECT_EQ(ep->port, 30000);
  EXPECT_EQ(ep->base_path, "/api");
  EXPECT_EQ(ep->HostPort(), "10.0.0.5:30000");
}

TEST(ParseHttpUrlTest, DefaultPortAndIpv6) {
  auto a = ParseHttpUrl("http://worker");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->port, 80);
  auto b = ParseHttpUrl("http://[::1]:8080");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 8080);
}

TEST(ParseHttpUrlTest, RejectsBadInput) {
  EXPECT_FALSE(ParseHttpUrl("https://x:1").ok());
  EXPECT_FALSE(ParseHttpUrl("http://:1").ok());
  EXPECT_FALSE(ParseHttpUrl("http://x:0").ok());
  EXPECT_FALSE(ParseHttpUrl("http://x:70000").ok());
  EXPECT_FALSE(ParseHttpUrl("http://x:12a").ok());
  EXPECT_FALSE(ParseHttpUrl("").ok());
  // User info is refused (it was taken for the host) and never echoed.
  auto creds = ParseHttpUrl("http://user:s3cret@127.0.0.1:8000");
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(std::string(creds.status().message()).find("s3cret"), std::string::npos);
}

}  // namespace
}  // namespace infera::http
