#include "event_wire/dp_endpoint.h"

#include <gtest/gtest.h>

namespace infera::events {
namespace {

TEST(OffsetEndpointPort, OffsetsLikeVllm) {
  EXPECT_EQ(OffsetEndpointPort("tcp://*:5557", 0), "tcp://*:5557");
  EXPECT_EQ(OffsetEndpointPort("tcp://*:5557", 3), "tcp://*:5560");
  EXPECT_EQ(OffsetEndpointPort("tcp://10.0.0.1:5558", 1), "tcp://10.0.0.1:5559");
  EXPECT_EQ(OffsetEndpointPort("inproc://cache", 2), "inproc://cache_dp2");
  EXPECT_EQ(OffsetEndpointPort("tcp://host", 2), "tcp://host");
}

}  // namespace
}  // namespace infera::events
