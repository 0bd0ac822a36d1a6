#include "router/request/tenant_salt.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace infera::router {
namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef";

// Golden values computed independently from the definition (tenant_salt.h) with
// Python's hmac, hashlib and base64.urlsafe_b64encode.
TEST(TenantSaltTest, GoldenValues) {
  const TenantSalt salt("Authorization", kKey);
  EXPECT_EQ(salt.Derive("Bearer sk-tenant-a", std::nullopt),
            "OhWVF1Di7irh6jisGTOC3MPMk4hwgPdd7WmQpTKwCzw");
  EXPECT_EQ(salt.Derive("Bearer sk-tenant-b", std::nullopt),
            "WpFcVUANV2ycQrZToX8RdrkKHjyIArhq7Pb4EaqS2B4");
  EXPECT_EQ(salt.Derive(std::nullopt, std::nullopt), "CxSXpCmQtD1VirghjcRXwN38t0xahzvhd4Rvq2wSxnk");
  EXPECT_EQ(salt.Derive("Bearer sk-tenant-a", "project-1"),
            "7pqWYEeDftKO1ZQEspar9EFUZ9yQ0z_KRsNc_IT__HA");
  // An empty header is a tenant of its own, not "no header".
  EXPECT_EQ(salt.Derive("", std::nullopt), "gqKtr9YWmvV10ETh-jPpl8dgy8dgK0mxWVU0DSUniLA");
}

TEST(TenantSaltTest, AClientSaltNeverReachesAnotherTenantsSalt) {
  const TenantSalt salt("Authorization", kKey);
  const std::string a = salt.Derive("Bearer a", std::nullopt);
  // Tenant b sending a's salt as its own cache_salt gets neither a's salt nor its own.
  EXPECT_NE(salt.Derive("Bearer b", a), a);
  EXPECT_NE(salt.Derive("Bearer b", a), salt.Derive("Bearer b", std::nullopt));
  // The encoding is length-prefixed: moving bytes between the parts changes the salt.
  EXPECT_NE(salt.Derive("ab", "c"), salt.Derive("a", "bc"));
  // Another key, other salts.
  EXPECT_NE(TenantSalt("Authorization", kKey + "x").Derive("Bearer a", std::nullopt), a);
}

TEST(TenantSaltTest, ParsesTheSpec) {
  EXPECT_EQ(*ParseTenantSaltSpec("header:Authorization"), "Authorization");
  EXPECT_EQ(*ParseTenantSaltSpec("header:X-Tenant-Id"), "X-Tenant-Id");
  EXPECT_FALSE(ParseTenantSaltSpec("Authorization").ok());
  EXPECT_FALSE(ParseTenantSaltSpec("header:").ok());
  EXPECT_FALSE(ParseTenantSaltSpec("header:X Tenant").ok());
  EXPECT_FALSE(ParseTenantSaltSpec("cookie:session").ok());
}

TEST(TenantSaltTest, SetsTheBodysCacheSalt) {
  using nlohmann::json;
  // Spliced in: one key, the rest of the bytes untouched.
  EXPECT_EQ(WithCacheSalt(R"( {"model":"m","prompt":"x"})", "S", false),
            R"( {"cache_salt":"S","model":"m","prompt":"x"})");
  EXPECT_EQ(WithCacheSalt("{}", "S", false), R"({"cache_salt":"S"})");
  EXPECT_EQ(WithCacheSalt("{ }", "S", false), R"({"cache_salt":"S" })");
  // The client's cache_salt (or null) is replaced, never duplicated.
  const json replaced =
      json::parse(WithCacheSalt(R"({"model":"m","cache_salt":"mine"})", "S", true));
  EXPECT_EQ(replaced, json::parse(R"({"model":"m","cache_salt":"S"})"));
  EXPECT_EQ(json::parse(WithCacheSalt(R"({"cache_salt":null,"model":"m"})", "S", true)),
            json::parse(R"({"cache_salt":"S","model":"m"})"));
}

}  // namespace
}  // namespace infera::router
