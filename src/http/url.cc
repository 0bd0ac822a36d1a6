#include "http/url.h"

#include <charconv>

namespace infera::http {

absl::StatusOr<Endpoint> ParseHttpUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return absl::InvalidArgumentError("URL must start with http://: '" + std::string(url) + "'");
  }
  std::string_view rest = url.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  // User info would be taken for the host (and echoed in errors); never accepted.
  if (authority.find('@') != std::string_view::npos) {
    return absl::InvalidArgumentError("URL must not carry user info (credentials)");
  }
  Endpoint ep;
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    ep.base_path = std::string(path);
  }
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError("bad IPv6 host in URL");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return absl::InvalidArgumentError("bad authority in URL");
      port = after.substr(1);
    }
  } else {
    size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
  }
  if (host.empty())
    return absl::InvalidArgumentError("URL has no host: '" + std::string(url) + "'");
  ep.host = std::string(host);
  if (!port.empty()) {
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || p != port.data() + port.size() || value == 0 || value > 65535) {
      return absl::InvalidArgumentError("bad port in URL: '" + std::string(url) + "'");
    }
    ep.port = static_cast<uint16_t>(value);
  }
  return ep;
}

}  // namespace infera::http
