// PdOptions: the router's prefill/decode disaggregation flags (doc/pd.md §6).
//
//   --pd-min-uncached-tokens N           conditional disaggregation (core::PdConfig)
//   --pd-prefill-guard-release P|C       when the prefill leg's active blocks go
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace infera::router {

// When a disaggregated request's prefill-leg holds are released. A serial protocol
// (vllm-nixl) always releases them when the prefill leg answers; a concurrent one
// (sglang-bootstrap, vllm-mooncake) at the end of the request, unless kPrefill.
enum class PdGuardRelease : uint8_t { kCompletion, kPrefill };

// "prefill" | "completion"; anything else is InvalidArgument.
absl::StatusOr<PdGuardRelease> ParsePdGuardRelease(std::string_view name);

struct PdOptions {
  uint64_t min_uncached_tokens = 0;  // 0: always disaggregate
  PdGuardRelease prefill_guard_release = PdGuardRelease::kCompletion;
  int decode_attempts = 3;         // decode leg tries before its first byte
  int64_t decode_backoff_ms = 20;  // doubled after each failed decode try
};

}  // namespace infera::router
