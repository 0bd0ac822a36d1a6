#include "router/request/sse_parser.h"

#include <gtest/gtest.h>

namespace infera::router {
namespace {

TEST(SseParserTest, SplitsAcrossPiecesAndLineEnds) {
  SseParser p;
  EXPECT_TRUE(p.Feed("data: a").empty());
  auto e = p.Feed("bc\r\n\r\n: comment\n\nevent: x\ndata: 1\ndata: 2\n\n");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0], "abc");
  EXPECT_EQ(e[1], "1\n2");
}

}  // namespace
}  // namespace infera::router
