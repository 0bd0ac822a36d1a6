#include "core/image_affinity.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <string>

namespace infera::core {
namespace {

TEST(ImageKeyTest, IsXxh3OfTheTrimmedReference) {
  const std::string url = "https://example.com/cat.png";
  EXPECT_EQ(ImageKey(url), XXH3_64bits_withSeed(url.data(), url.size(), 0));
  EXPECT_EQ(ImageKey("  \t" + url + "\n "), ImageKey(url));
  EXPECT_NE(ImageKey(url), ImageKey("https://example.com/dog.png"));
  // Data URIs are hashed whole, so different bytes give different keys.
  EXPECT_NE(ImageKey("data:image/png;base64,AAAA"), ImageKey("data:image/png;base64,AAAB"));
}

TEST(ImageAffinityTest, RecordAndCount) {
  ImageAffinity affinity;
  const std::vector<uint64_t> keys = {ImageKey("a"), ImageKey("b")};
  EXPECT_EQ(affinity.CountHeld(0, keys), 0u);
  affinity.Record(0, keys);
  EXPECT_EQ(affinity.CountHeld(0, keys), 2u);
  EXPECT_EQ(affinity.CountHeld(1, keys), 0u);
  const std::vector<uint64_t> mixed = {ImageKey("a"), ImageKey("c")};
  EXPECT_EQ(affinity.CountHeld(0, mixed), 1u);
  affinity.Record(0, keys);  // repeat: no duplicates
  EXPECT_EQ(affinity.Size(0), 2u);
}

TEST(ImageAffinityTest, EvictsLeastRecentlyServed) {
  ImageAffinity affinity(3);
  for (uint64_t k : {1, 2, 3}) affinity.Record(0, std::vector<uint64_t>{k});
  affinity.Record(0, std::vector<uint64_t>{1});  // 1 is now most recent
  affinity.Record(0, std::vector<uint64_t>{4});  // evicts 2
  EXPECT_TRUE(affinity.Holds(0, 1));
  EXPECT_FALSE(affinity.Holds(0, 2));
  EXPECT_TRUE(affinity.Holds(0, 3));
  EXPECT_TRUE(affinity.Holds(0, 4));
  EXPECT_EQ(affinity.Size(0), 3u);
}

TEST(ImageAffinityTest, DefaultCapacityIs256) {
  ImageAffinity affinity;
  for (uint64_t k = 0; k < 300; ++k) affinity.Record(5, std::vector<uint64_t>{k});
  EXPECT_EQ(affinity.Size(5), 256u);
  EXPECT_FALSE(affinity.Holds(5, 43));
  EXPECT_TRUE(affinity.Holds(5, 44));
}

TEST(ImageAffinityTest, RemoveTargetForgets) {
  ImageAffinity affinity;
  affinity.Record(1, std::vector<uint64_t>{7});
  affinity.RemoveTarget(1);
  EXPECT_FALSE(affinity.Holds(1, 7));
  EXPECT_EQ(affinity.Size(1), 0u);
}

}  // namespace
}  // namespace infera::core
