// NatsStreamRefusal (doc/snapshot.md §6.4): when a NATS snapshot may continue on the
// stream from begin_stream_seq + 1.
#include <gtest/gtest.h>

#include "events/nats_event_source.h"

namespace infera::events {
namespace {

constexpr uint64_t kCreated = 1'764'000'000'123'456'789ull;

TEST(NatsStreamRefusalTest, SameStreamHoldingTheNextMessageContinues) {
  EXPECT_EQ(
      NatsStreamRefusal(kCreated, 41, {.first_seq = 1, .last_seq = 90, .created_ns = kCreated}),
      std::nullopt);
  // The stream's first message is exactly the one after the snapshot.
  EXPECT_EQ(
      NatsStreamRefusal(kCreated, 41, {.first_seq = 42, .last_seq = 90, .created_ns = kCreated}),
      std::nullopt);
  // Nothing came after the snapshot; nothing was discarded either (an emptied stream's
  // first sequence is its last + 1).
  EXPECT_EQ(
      NatsStreamRefusal(kCreated, 90, {.first_seq = 91, .last_seq = 90, .created_ns = kCreated}),
      std::nullopt);
}

TEST(NatsStreamRefusalTest, RecreatedStreamIsRefused) {
  const std::optional<std::string> r =
      NatsStreamRefusal(kCreated, 41, {.first_seq = 1, .last_seq = 90, .created_ns = kCreated + 1});
  ASSERT_TRUE(r.has_value());
  EXPECT_NE(r->find("stream created differs"), std::string::npos) << *r;
}

TEST(NatsStreamRefusalTest, StreamThatDiscardedWhatTheSnapshotNeedsIsRefused) {
  const std::optional<std::string> r =
      NatsStreamRefusal(kCreated, 41, {.first_seq = 43, .last_seq = 90, .created_ns = kCreated});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, "needs stream seq 42, first is 43");
}

}  // namespace
}  // namespace infera::events
