// Test-only helpers shared by the ingestor's tests (kv_event_ingestor_test.cc,
// kv_snapshot_ingest_test.cc): an in-process engine publisher on OS-picked ports and
// the ingestion target that follows it.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "engine_events/publisher.h"
#include "events/kv_event_ingestor.h"

namespace infera::events::test_support {

inline std::unique_ptr<EventPublisher> MakePublisher(size_t buffer = 10'000) {
  auto pub = EventPublisher::Create({.pub_endpoint = "tcp://127.0.0.1:0",
                                     .replay_endpoint = "tcp://127.0.0.1:0",
                                     .topic = "kv-events",
                                     .shape = WireShape::kVllm,
                                     .buffer_batches = buffer});
  EXPECT_TRUE(pub.ok()) << pub.status();
  return std::move(*pub);
}

// Worker "engine:1", rank 0, 16-token blocks; without its replay socket when !replay.
inline IngestTarget TargetFor(const EventPublisher& pub, bool replay = true) {
  return {.key = {"engine:1", 0},
          .events_endpoint = pub.pub_endpoint(),
          .replay_endpoint = replay ? pub.replay_endpoint() : "",
          .block_size = 16,
          .topic = "kv-events"};
}

}  // namespace infera::events::test_support
