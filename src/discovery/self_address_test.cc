#include "discovery/self_address.h"

#include <gtest/gtest.h>

namespace infera::discovery {
namespace {

TEST(SelfAddressTest, CanonicalIp) {
  EXPECT_EQ(SelfAddress::CanonicalIp("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(SelfAddress::CanonicalIp("[::1]"), "::1");
  EXPECT_EQ(SelfAddress::CanonicalIp("0:0:0:0:0:0:0:1"), "::1");
  EXPECT_EQ(SelfAddress::CanonicalIp("::ffff:10.0.0.5"), "10.0.0.5");
  EXPECT_EQ(SelfAddress::CanonicalIp("localhost"), "");
  EXPECT_EQ(SelfAddress::CanonicalIp("10.0.0"), "");
}

// Listening on every interface: the port plus any local address, loopback or
// wildcard is this router; another port or host is not.
TEST(SelfAddressTest, WildcardListenMeansEveryLocalInterface) {
  for (const char* listen : {"0.0.0.0", "::"}) {
    SelfAddress self(listen, 8000, {"127.0.0.1", "10.0.0.5", "fe80::1", "::1"});
    for (const char* host : {"127.0.0.1", "127.8.9.10", "10.0.0.5", "0.0.0.0", "::", "[::1]",
                             "::ffff:10.0.0.5", "fe80::1"}) {
      EXPECT_TRUE(self.PointsAtSelf(host, 8000)) << listen << " " << host;
      EXPECT_FALSE(self.PointsAtSelf(host, 8001)) << listen << " " << host;
    }
    EXPECT_FALSE(self.PointsAtSelf("10.0.0.6", 8000)) << listen;
    EXPECT_FALSE(self.PointsAtSelf("192.0.2.1", 8000)) << listen;
  }
}

TEST(SelfAddressTest, SpecificListenAddress) {
  SelfAddress self("10.0.0.5", 8000, {"127.0.0.1", "10.0.0.5"});
  EXPECT_TRUE(self.PointsAtSelf("10.0.0.5", 8000));
  EXPECT_FALSE(self.PointsAtSelf("127.0.0.1", 8000));  // not listening there
  EXPECT_FALSE(self.PointsAtSelf("0.0.0.0", 8000));
  SelfAddress loop("127.0.0.1", 8000, {"127.0.0.1"});
  EXPECT_TRUE(loop.PointsAtSelf("127.0.0.1", 8000));
  EXPECT_TRUE(loop.PointsAtSelf("0.0.0.0", 8000));  // connects to the loopback
  EXPECT_FALSE(loop.PointsAtSelf("127.0.0.2", 8000));
}

// A name is resolved: localhost is the loopback (/etc/hosts, no DNS server).
TEST(SelfAddressTest, NamesAreResolved) {
  SelfAddress self("0.0.0.0", 8000, {"127.0.0.1"});
  EXPECT_TRUE(self.PointsAtSelf("localhost", 8000));
  EXPECT_FALSE(self.PointsAtSelf("localhost", 9000));
  EXPECT_FALSE(self.PointsAtSelf("name.invalid", 8000));  // RFC 6761: never resolves
}

TEST(SelfAddressTest, ForListenReadsTheInterfaces) {
  SelfAddress self = SelfAddress::ForListen("0.0.0.0", 8000);
  EXPECT_TRUE(self.PointsAtSelf("127.0.0.1", 8000));
  SelfAddress none = SelfAddress::ForListen("0.0.0.0", 0);  // port unknown: never self
  EXPECT_FALSE(none.PointsAtSelf("127.0.0.1", 0));
}

}  // namespace
}  // namespace infera::discovery
