// Test-only helpers shared by the ingestor's tests (src/events/kv_event_ingestor_test.cc,
// src/events/kv_snapshot_ingest_test.cc): an in-process engine publisher on OS-picked
// ports and the ingestion target that follows it. Lives here, not in src/events, because
// only `*_test.cc` files there may use the engine side (src/engine_events).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "engine_events/publisher.h"
#include "events/kv_event_ingestor.h"

namespace infera::testing {

// On OS-picked ports, or on a restarted engine's (pub.pub_endpoint(), pub.replay_endpoint()).
inline std::unique_ptr<events::EventPublisher> MakePublisher(
    size_t buffer = 10'000, const std::string& pub_endpoint = "tcp://127.0.0.1:0",
    const std::string& replay_endpoint = "tcp://127.0.0.1:0") {
  auto pub = events::EventPublisher::Create({.pub_endpoint = pub_endpoint,
                                             .replay_endpoint = replay_endpoint,
                                             .topic = "kv-events",
                                             .shape = events::WireShape::kVllm,
                                             .buffer_batches = buffer});
  EXPECT_TRUE(pub.ok()) << pub.status();
  return std::move(*pub);
}

// Worker "engine:1", rank 0, 16-token blocks; without its replay socket when !replay.
inline events::IngestTarget TargetFor(const events::EventPublisher& pub, bool replay = true) {
  return {.key = {"engine:1", 0},
          .events_endpoint = pub.pub_endpoint(),
          .replay_endpoint = replay ? pub.replay_endpoint() : "",
          .block_size = 16,
          .topic = "kv-events"};
}

}  // namespace infera::testing
