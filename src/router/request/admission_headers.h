// The admission queue's request fields, read from headers (doc/admission.md,
// "Router wiring", item 2).
//
//   priority: X-Infera-Priority, a decimal integer, higher released first; absent: 0.
//             Anything else (empty, sign only, trailing bytes, out of int range) is
//             InvalidArgument, which the caller answers with 400 in the API's shape.
//   tenant:   X-Infera-Tenant when present; else the API key (Authorization, minus a
//             "Bearer " prefix) as its XXH3-64 in hex, so the key itself is never
//             held or logged; else "".
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace infera::router {

inline constexpr std::string_view kPriorityHeader = "X-Infera-Priority";
inline constexpr std::string_view kTenantHeader = "X-Infera-Tenant";

absl::StatusOr<int> ParseAdmissionPriority(std::optional<std::string_view> header);

std::string AdmissionTenant(std::optional<std::string_view> tenant_header,
                            std::optional<std::string_view> authorization);

}  // namespace infera::router
