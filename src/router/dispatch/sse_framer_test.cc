#include "router/dispatch/sse_framer.h"

#include <gtest/gtest.h>

#include "router/request/sse_parser.h"

namespace infera::router {
namespace {

// Feeds `stream` cut into pieces at `cuts` and returns what the framer let out after
// each piece.
std::vector<std::string> FeedCut(SseFramer& f, std::string_view stream, size_t step) {
  std::vector<std::string> outs;
  for (size_t at = 0; at < stream.size(); at += step) {
    std::string out;
    EXPECT_TRUE(f.Feed(stream.substr(at, step), out));
    outs.push_back(out);
  }
  return outs;
}

TEST(SseFramerTest, ForwardsWholeEventsOnlyWhereverTheStreamIsCut) {
  const std::string stream =
      "data: {\"a\":1}\n\n"
      ": comment\r\n\r\n"
      "event: x\ndata: 1\ndata: 2\n\n"
      "data: [DONE]\n\n";
  for (size_t step = 1; step <= stream.size(); ++step) {
    SseFramer f(1 << 20);
    std::string all;
    for (const std::string& out : FeedCut(f, stream, step)) {
      // Every piece let out ends an event: an empty line closes it.
      if (!out.empty()) {
        EXPECT_TRUE(out.ends_with("\n\n") || out.ends_with("\r\n\r\n")) << step << ": " << out;
      }
      all += out;
    }
    EXPECT_EQ(all, stream) << step;
    EXPECT_EQ(f.pending_bytes(), 0u);
  }
}

TEST(SseFramerTest, HoldsAnIncompleteEvent) {
  SseFramer f(1 << 20);
  std::string out;
  ASSERT_TRUE(f.Feed("data: {\"choi", out));
  EXPECT_EQ(out, "");
  EXPECT_EQ(f.pending_bytes(), 12u);
  ASSERT_TRUE(f.Feed("ces\":[]}\n", out));
  EXPECT_EQ(out, "");  // one line end is not an event's end
  ASSERT_TRUE(f.Feed("\ndata: x", out));
  EXPECT_EQ(out, "data: {\"choices\":[]}\n\n");
  EXPECT_EQ(f.pending_bytes(), 7u);
  // What the relay writes after a failure starts a fresh event: a parser of the
  // forwarded bytes plus the error event sees exactly two events.
  SseParser p;
  auto events = p.Feed(out + "data: {\"error\":{}}\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1], "{\"error\":{}}");
}

TEST(SseFramerTest, ALoneCrIsNotALineEnd) {
  SseFramer f(1 << 20);
  std::string out;
  ASSERT_TRUE(f.Feed("data: a\r\r\n", out));  // the line is "data: a\r\r"
  EXPECT_EQ(out, "");
  ASSERT_TRUE(f.Feed("\r\n", out));
  EXPECT_EQ(out, "data: a\r\r\n\r\n");
}

TEST(SseFramerTest, AnEventOverTheBoundIsRefused) {
  SseFramer f(100);
  std::string out;
  ASSERT_TRUE(f.Feed("data: ok\n\n" + std::string(60, 'x'), out));
  EXPECT_EQ(out, "data: ok\n\n");
  out.clear();
  EXPECT_FALSE(f.Feed(std::string(60, 'y'), out));  // 120 bytes held: over 100
  EXPECT_TRUE(f.overflowed());
  EXPECT_EQ(f.pending_bytes(), 0u);  // released
  EXPECT_FALSE(f.Feed("\n\n", out));
  EXPECT_EQ(out, "");
  // Exactly the bound is fine; events completed in the same piece go out first.
  SseFramer g(10);
  ASSERT_TRUE(g.Feed("data: 1\n\n0123456789", out));
  EXPECT_EQ(out, "data: 1\n\n");
}

}  // namespace
}  // namespace infera::router
