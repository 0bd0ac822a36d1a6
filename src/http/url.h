// Parsing of the plain http:// URLs workers register ("http://10.0.0.5:30000").
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace infera::http {

struct Endpoint {
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // "" or "/prefix" without a trailing slash

  // "host:port", the connection-pool key and the Host header.
  std::string HostPort() const { return host + ":" + std::to_string(port); }
};

// Accepts "http://host[:port][/path]" (IPv6 as "[::1]"). Other schemes, empty
// hosts, user info ("user:pw@", never echoed) and bad ports are InvalidArgument.
absl::StatusOr<Endpoint> ParseHttpUrl(std::string_view url);

}  // namespace infera::http
