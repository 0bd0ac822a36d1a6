// Client cache-retention hints, as Infera reads and applies them (doc/router.md
// "Cache-control hints"; Infera rust/router/src/cache_control.rs and
// infera/router/policy/kv_aware.py).
//
// Two shapes, from the client's body before any translation:
//   - Anthropic: blocks of `system[]`, `tools[]` and `messages[].content[]` carrying
//     `cache_control: {"type": "ephemeral", "ttl"?: ...}`. ttl 1h|1hr|60m|3600s|long is
//     long; 5m|5min|300s|short, another ttl or none is short (Anthropic's 5-minute
//     default); a `thinking` / `redacted_thinking` block with cache_control is none (never
//     cached); a cache_control whose type is not "ephemeral" says nothing.
//   - OpenAI: `prompt_cache_retention` 24h|1h|long is long, 5m|short short,
//     none|off|disabled none (any case, trimmed; another value says nothing); without
//     it, a non-null `prompt_cache_key` is short.
// The request's retention is the strongest seen (none < short < long); `explicit_hint`
// says whether any hint was seen at all (a request without one is "none", not
// explicit).
//
// Applied to kv-aware picks as a factor on the overlap weight (both the text term and
// the image term it scales): long x2, explicit none x0.1, otherwise x1. Each kv-aware
// pick counts infera_cache_control_seen_total{retention}; one whose text overlap is
// dropped because the request carries images counts
// infera_cache_locality_skipped_total{reason="multimodal"}.
//
// Thread-safety: ParseCacheRetention is pure; CacheControlMetrics' methods may be
// called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "simdjson.h"

namespace infera::router {

enum class Retention : uint8_t { kNone = 0, kShort = 1, kLong = 2 };

const char* RetentionName(Retention r);  // "none", "short", "long"

struct CacheRetention {
  Retention retention = Retention::kNone;
  bool explicit_hint = false;
};

CacheRetention ParseCacheRetention(const simdjson::dom::element& body);

// Infera's _LONG_RETENTION_AMPLIFIER (2.0) and _NONE_RETENTION_DAMPENER (0.1).
inline constexpr double kLongRetentionFactor = 2.0;
inline constexpr double kNoneRetentionFactor = 0.1;
double RetentionWeightFactor(const CacheRetention& hints);

class CacheControlMetrics {
 public:
  // One kv-aware pick of a request with these hints (`multimodal`: it carries images).
  void CountPick(const CacheRetention& hints, bool multimodal) {
    seen_[static_cast<size_t>(hints.retention)].fetch_add(1, std::memory_order_relaxed);
    if (multimodal) skipped_multimodal_.fetch_add(1, std::memory_order_relaxed);
  }
  void Render(std::string& out) const;

 private:
  std::array<std::atomic<uint64_t>, 3> seen_{};
  std::atomic<uint64_t> skipped_multimodal_{0};
};

}  // namespace infera::router
