#include "router/request/admission_headers.h"

#include <gtest/gtest.h>

#include <optional>

namespace infera::router {
namespace {

TEST(AdmissionHeadersTest, PriorityIsAnIntegerOrZeroWhenAbsent) {
  EXPECT_EQ(*ParseAdmissionPriority(std::nullopt), 0);
  EXPECT_EQ(*ParseAdmissionPriority("7"), 7);
  EXPECT_EQ(*ParseAdmissionPriority("-3"), -3);
  EXPECT_EQ(*ParseAdmissionPriority("2147483647"), 2147483647);
}

TEST(AdmissionHeadersTest, PriorityRejectsAnythingElse) {
  for (const char* bad : {"", "high", "1.5", "3 ", " 3", "+1", "-", "2147483648", "0x10"}) {
    const auto parsed = ParseAdmissionPriority(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("X-Infera-Priority"), std::string_view::npos);
  }
}

TEST(AdmissionHeadersTest, TenantHeaderFirstThenHashedKeyThenEmpty) {
  EXPECT_EQ(AdmissionTenant("team-a", "Bearer sk-1"), "team-a");
  EXPECT_EQ(AdmissionTenant("", "Bearer sk-1"), "");
  const std::string a = AdmissionTenant(std::nullopt, "Bearer sk-1");
  EXPECT_EQ(a, AdmissionTenant(std::nullopt, "sk-1"));  // "Bearer " is not part of the key
  EXPECT_NE(a, AdmissionTenant(std::nullopt, "Bearer sk-2"));
  EXPECT_EQ(a.find("sk-1"), std::string::npos);  // the key is never held in clear
  EXPECT_EQ(a.size(), 4u + 16u);
  EXPECT_EQ(AdmissionTenant(std::nullopt, std::nullopt), "");
  EXPECT_EQ(AdmissionTenant(std::nullopt, ""), "");
}

}  // namespace
}  // namespace infera::router
