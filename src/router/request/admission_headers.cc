#include "router/request/admission_headers.h"

#include <xxhash.h>

#include <charconv>

#include "absl/strings/str_format.h"

namespace infera::router {

absl::StatusOr<int> ParseAdmissionPriority(std::optional<std::string_view> header) {
  if (!header) return 0;
  const std::string_view text = *header;
  int value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  // from_chars rejects '+'; a leading '-' is accepted and means a lower priority.
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return absl::InvalidArgumentError(std::string(kPriorityHeader) + " must be an integer, got \"" +
                                      std::string(text.substr(0, 32)) + "\"");
  }
  return value;
}

std::string AdmissionTenant(std::optional<std::string_view> tenant_header,
                            std::optional<std::string_view> authorization) {
  if (tenant_header) return std::string(*tenant_header);
  if (!authorization || authorization->empty()) return "";
  std::string_view key = *authorization;
  constexpr std::string_view kBearer = "Bearer ";
  if (key.substr(0, kBearer.size()) == kBearer) key.remove_prefix(kBearer.size());
  return absl::StrFormat("key-%016x", XXH3_64bits(key.data(), key.size()));
}

}  // namespace infera::router
