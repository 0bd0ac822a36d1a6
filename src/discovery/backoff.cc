#include "discovery/backoff.h"

#include <algorithm>
#include <cstdlib>

namespace infera::discovery {

Backoff::Backoff(int64_t initial_ms, int64_t max_ms, uint64_t seed)
    : initial_ms_(initial_ms), max_ms_(max_ms), base_ms_(initial_ms), random_(seed) {
  if (initial_ms <= 0 || max_ms < initial_ms) std::abort();  // programming error
}

int64_t Backoff::NextDelayMs() {
  int64_t base = base_ms_;
  base_ms_ = std::min(max_ms_, base_ms_ * 2);
  int64_t half = base / 2;
  return half + static_cast<int64_t>(random_.Uniform(static_cast<uint64_t>(base - half) + 1));
}

}  // namespace infera::discovery
