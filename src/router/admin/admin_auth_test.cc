#include "router/admin/admin_auth.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace infera::router {
namespace {

TEST(AdminAuthTest, OffProtectsNothing) {
  const AdminAuth off;
  EXPECT_FALSE(off.enabled());
  for (const char* path : {"/v1/admin/cache-view/w", "/v1/workers", "/dashboard", "/metrics"}) {
    EXPECT_FALSE(off.Protects(path)) << path;
  }
  EXPECT_FALSE(off.Allows("Bearer anything"));
}

TEST(AdminAuthTest, ProtectedPaths) {
  const AdminAuth auth("s3cret-token", false);
  for (const char* path : {"/v1/admin/cache-view/w", "/v1/admin/fleet", "/v1/admin", "/v1/workers",
                           "/v1/workers/x", "/dashboard", "/dashboard/app.js"}) {
    EXPECT_TRUE(auth.Protects(path)) << path;
  }
  for (const char* path : {"/health", "/ready", "/metrics", "/v1/models", "/v1/chat/completions",
                           "/v1/completions", "/v1/messages", "/"}) {
    EXPECT_FALSE(auth.Protects(path)) << path;
  }
  EXPECT_TRUE(AdminAuth("s3cret-token", true).Protects("/metrics"));
  EXPECT_FALSE(AdminAuth("s3cret-token", true).Protects("/health"));
}

TEST(AdminAuthTest, BearerCredentials) {
  const AdminAuth auth("s3cret-token", false);
  EXPECT_TRUE(auth.Allows("Bearer s3cret-token"));
  EXPECT_TRUE(auth.Allows("bearer s3cret-token"));  // the scheme is case-insensitive
  EXPECT_TRUE(auth.Allows("BEARER   s3cret-token  "));
  EXPECT_FALSE(auth.Allows(""));
  EXPECT_FALSE(auth.Allows("s3cret-token"));
  EXPECT_FALSE(auth.Allows("Bearer"));
  EXPECT_FALSE(auth.Allows("Bearer "));
  EXPECT_FALSE(auth.Allows("Bearers3cret-token"));
  EXPECT_FALSE(auth.Allows("Basic s3cret-token"));
  EXPECT_FALSE(auth.Allows("Bearer s3cret-toke"));
  EXPECT_FALSE(auth.Allows("Bearer s3cret-token2"));
  EXPECT_FALSE(auth.Allows("Bearer S3CRET-TOKEN"));  // the token is not
  EXPECT_FALSE(auth.Allows("Bearer s3cret token"));
}

TEST(AdminAuthTest, TokenValidation) {
  EXPECT_TRUE(ValidateAdminToken("abc-DEF_123.~+/=").ok());
  EXPECT_FALSE(ValidateAdminToken("").ok());
  EXPECT_FALSE(ValidateAdminToken("two words").ok());
  EXPECT_FALSE(ValidateAdminToken("tab\there").ok());
  EXPECT_FALSE(ValidateAdminToken("caf\xc3\xa9").ok());
  EXPECT_TRUE(ValidateAdminToken(std::string(4096, 'a')).ok());
  EXPECT_FALSE(ValidateAdminToken(std::string(4097, 'a')).ok());
}

TEST(AdminAuthTest, TokenFile) {
  const std::string path = ::testing::TempDir() + "admin_auth_test_token";
  auto write = [&](const std::string& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  };
  write("file-token\n");
  auto token = ReadAdminTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "file-token");
  write("file-token \r\n\n");
  EXPECT_EQ(*ReadAdminTokenFile(path), "file-token");
  write("\n");
  EXPECT_FALSE(ReadAdminTokenFile(path).ok());
  write("in side\n");
  auto bad = ReadAdminTokenFile(path);
  ASSERT_FALSE(bad.ok());
  // The error names the file, never the content.
  EXPECT_NE(bad.status().message().find(path), std::string::npos);
  EXPECT_EQ(bad.status().message().find("in side"), std::string::npos);
  write(std::string(4096, 'a') + "\n");
  EXPECT_TRUE(ReadAdminTokenFile(path).ok());
  write(std::string(5000, 'a'));
  EXPECT_FALSE(ReadAdminTokenFile(path).ok());
  std::remove(path.c_str());
  EXPECT_EQ(ReadAdminTokenFile(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(AdminAuthTest, Loopback) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host :
       {"0.0.0.0", "::", "10.0.0.1", "127.0.0.1.example.com", "127.0.0", "router.local", ""}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

}  // namespace
}  // namespace infera::router
