#include "router/metrics/metrics.h"

#include <gtest/gtest.h>

namespace infera::router {
namespace {

TEST(MetricsTest, HistogramIsCumulative) {
  HistogramFamily h("x_seconds", "help", {0.1, 1});
  h.Observe("a=\"1\"", 0.05);
  h.Observe("a=\"1\"", 0.5);
  h.Observe("a=\"1\"", 5);
  std::string out;
  h.Render(out);
  EXPECT_NE(out.find("x_seconds_bucket{a=\"1\",le=\"0.10000000000000001\"} 1\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("x_seconds_bucket{a=\"1\",le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{a=\"1\",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_count{a=\"1\"} 3\n"), std::string::npos);
}

TEST(MetricsTest, CounterAndEscaping) {
  CounterFamily c("y_total", "help");
  c.Add("w=\"" + EscapeLabel("a\"b") + "\"", 2);
  std::string out;
  c.Render(out);
  EXPECT_NE(out.find("y_total{w=\"a\\\"b\"} 2\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace infera::router
