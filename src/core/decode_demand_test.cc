#include "core/decode_demand.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infera::core {
namespace {

TEST(DecodeDemandTest, LowestProjectedDemandWinsAndReleasesOnce) {
  DecodeDemand d;
  std::vector<std::string> keys = {"a", "b"};
  std::vector<double> loads = {0, 0};
  EXPECT_EQ(d.Select(keys, loads, 100), 0u);  // tie: candidate order
  auto r1 = d.Reserve("a", DecodeDemand::Demand(100, 2));
  EXPECT_EQ(d.Tokens("a"), 200u);
  EXPECT_EQ(d.Select(keys, loads, 100), 1u);
  DecodeDemand::Reservation moved = std::move(r1);
  EXPECT_FALSE(r1.pending());
  moved.Release();
  moved.Release();
  EXPECT_EQ(d.Tokens("a"), 0u);
  EXPECT_EQ(d.EntryCount(), 0u);
}

TEST(DecodeDemandTest, InvalidNCountsAsOneAndTiesUseLoad) {
  EXPECT_EQ(DecodeDemand::Demand(10, 0), 10u);
  EXPECT_EQ(DecodeDemand::Demand(10, -3), 10u);
  DecodeDemand d;
  std::vector<std::string> keys = {"a", "b"};
  std::vector<double> loads = {5, 1};
  EXPECT_EQ(d.Select(keys, loads, 10), 1u);
}

TEST(DecodeDemandTest, RequestWeightCountsHeldRequests) {
  DecodeDemand d(/*request_weight=*/1000);
  auto small1 = d.Reserve("a", 10);
  auto small2 = d.Reserve("a", 10);
  auto big = d.Reserve("b", 1500);
  std::vector<std::string> keys = {"a", "b"};
  std::vector<double> loads = {0, 0};
  // a: 20 + 5 + 2000 = 2025; b: 1500 + 5 + 1000 = 2505 -> a.
  EXPECT_EQ(d.Select(keys, loads, 5), 0u);
  auto third = d.Reserve("a", 10);
  // a: 30 + 5 + 3000 = 3035 > b: 2505 -> b.
  EXPECT_EQ(d.Select(keys, loads, 5), 1u);
  EXPECT_EQ(d.Requests("a"), 3u);
}

TEST(DecodeDemandTest, ParseMode) {
  EXPECT_EQ(*ParseDemandMode("shadow"), DemandMode::kShadow);
  EXPECT_FALSE(ParseDemandMode("maybe").ok());
}

}  // namespace
}  // namespace infera::core
