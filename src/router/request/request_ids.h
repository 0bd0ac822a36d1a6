// RequestIds: generated request ids, 24 lowercase hex digits.
//
// A sequence number mixed with a salt drawn once from the router's injected
// randomness: unique within a process, unlikely to repeat across restarts, and
// reproducible in tests (seeded).
//
// Thread-safety: Next() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace infera::router {

class RequestIds {
 public:
  explicit RequestIds(uint64_t salt) : salt_(salt) {}
  std::string Next();

 private:
  const uint64_t salt_;
  std::atomic<uint64_t> seq_{0};
};

}  // namespace infera::router
