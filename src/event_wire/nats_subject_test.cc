#include "event_wire/nats_subject.h"

#include <gtest/gtest.h>

namespace infera::events {
namespace {

TEST(NatsSubject, Base64UrlMatchesRfc4648Vectors) {
  // RFC 4648 §10 test vectors, unpadded; and the two URL-safe characters.
  EXPECT_EQ(Base64UrlEncode(""), "");
  EXPECT_EQ(Base64UrlEncode("f"), "Zg");
  EXPECT_EQ(Base64UrlEncode("fo"), "Zm8");
  EXPECT_EQ(Base64UrlEncode("foo"), "Zm9v");
  EXPECT_EQ(Base64UrlEncode("foob"), "Zm9vYg");
  EXPECT_EQ(Base64UrlEncode("fooba"), "Zm9vYmE");
  EXPECT_EQ(Base64UrlEncode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");
  EXPECT_EQ(Base64UrlDecode("-_8"), std::string("\xfb\xff"));
  EXPECT_EQ(Base64UrlDecode("Zm9vYmFy"), "foobar");
}

TEST(NatsSubject, DecodeRejectsWhatIsNotBase64Url) {
  EXPECT_FALSE(Base64UrlDecode("Zg=="));  // padded
  EXPECT_FALSE(Base64UrlDecode("Z+8"));   // standard alphabet
  EXPECT_FALSE(Base64UrlDecode("Z"));     // impossible length
  EXPECT_FALSE(Base64UrlDecode("Zh"));    // non-zero trailing bits
}

TEST(NatsSubject, SubjectRoundTripsWorkerIdsWithDots) {
  const core::TargetKey key{"10.0.0.5:30000", 3};
  const std::string subject = KvEventSubject(key);
  EXPECT_EQ(subject, "infera.kv.events.MTAuMC4wLjU6MzAwMDA.3");
  std::optional<core::TargetKey> back = ParseKvEventSubject(subject);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, key);
}

TEST(NatsSubject, ParseRejectsOtherSubjects) {
  EXPECT_FALSE(ParseKvEventSubject("infera.kv.other.MTA.0"));
  EXPECT_FALSE(ParseKvEventSubject("infera.kv.events.MTA"));
  EXPECT_FALSE(ParseKvEventSubject("infera.kv.events..0"));
  EXPECT_FALSE(ParseKvEventSubject("infera.kv.events.MTA.x"));
  EXPECT_FALSE(ParseKvEventSubject("infera.kv.events.MTA.0.1"));
  EXPECT_FALSE(ParseKvEventSubject("infera.kv.events.M+A.0"));
}

}  // namespace
}  // namespace infera::events
