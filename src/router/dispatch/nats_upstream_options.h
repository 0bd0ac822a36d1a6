// NatsUpstreamOptions: the NATS request transport's flags (nats_upstream.h), apart so
// that the transport's parts (nats_inbox.h) read them without the upstream's header.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace infera::router {

struct NatsUpstreamOptions {
  std::string nats_url = "nats://127.0.0.1:4222";  // --nats-server (or NATS_SERVER)
  int64_t idle_timeout_ms = 900'000;  // --nats-req-idle-timeout (Infera's 900 s; 0: off)
  int64_t max_duration_ms = 0;        // --nats-req-max-duration (0: off)
  uint64_t max_buffered_bytes = uint64_t{8} << 20;  // per request, frames not yet read
  int cancel_sends = 3;                             // Infera's resends
  int64_t cancel_gap_ms = 1000;
};

// InvalidArgument naming the flag: a timeout below 0 or above 30 days, a buffer
// bound below 64 KiB, cancel_sends outside 1..10.
absl::Status ValidateNatsUpstreamOptions(const NatsUpstreamOptions& options);

}  // namespace infera::router
