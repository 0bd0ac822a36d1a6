#include "event_wire/dp_endpoint.h"

#include <charconv>

#include "absl/strings/str_cat.h"

namespace infera::events {

std::string OffsetEndpointPort(const std::string& endpoint, uint32_t rank) {
  if (rank == 0 || endpoint.empty()) return endpoint;
  if (endpoint.rfind("inproc://", 0) == 0 || endpoint.rfind("ipc://", 0) == 0) {
    return absl::StrCat(endpoint, "_dp", rank);
  }
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return endpoint;
  uint32_t port = 0;
  const char* begin = endpoint.data() + colon + 1;
  const char* end = endpoint.data() + endpoint.size();
  auto [ptr, ec] = std::from_chars(begin, end, port);
  if (ec != std::errc() || ptr != end || begin == end) return endpoint;
  return absl::StrCat(endpoint.substr(0, colon + 1), port + rank);
}

}  // namespace infera::events
