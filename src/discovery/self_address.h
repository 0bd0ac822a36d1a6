// SelfAddress: does a worker's URL point at this router's own listen address?
//
// A worker record whose url reaches the router itself makes every request it is
// picked for come back to the router as a new request, which is routed again: one
// client request became ~10,000 internal ones and 19,000 descriptors (issue 22). The
// router refuses such a record when discovery reports it (logged, counted in
// infera_router_workers_refused_total{reason="self_address"}); the X-Infera-Via hop
// header catches the loops this check cannot see (a name or a balancer in between,
// another router replica).
//
// A url points at the router when its port is the listen port and its host is one of
// the router's addresses: the listen host itself; when the router listens on 0.0.0.0
// or ::, any address of a local interface (getifaddrs), any 127.0.0.0/8 address, ::1,
// and 0.0.0.0 and :: themselves (connecting to them reaches this host); when it
// listens on a loopback address, also 0.0.0.0 and ::. A host name is resolved
// (getaddrinfo, on the discovery thread that calls Check, never an event loop) and
// points at the router when one of its addresses does. IPv4-mapped IPv6 addresses
// count as their IPv4 address.
//
// Thread-safety: immutable after construction; Check() from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infera::discovery {

class SelfAddress {
 public:
  // `local_addresses`: the interfaces' addresses (text form); see ForListen().
  SelfAddress(std::string listen_host, uint16_t listen_port,
              std::vector<std::string> local_addresses);

  // The router listening on host:port, with this machine's interface addresses.
  static SelfAddress ForListen(std::string listen_host, uint16_t listen_port);

  // True when http://host:port reaches this router (see above). `host`: an IP
  // literal (IPv6 with or without brackets) or a name (resolved).
  bool PointsAtSelf(std::string_view host, uint16_t port) const;

  // An IP literal in canonical text form ("::ffff:1.2.3.4" -> "1.2.3.4", "[::1]" ->
  // "::1"); "" when `text` is not an IP literal.
  static std::string CanonicalIp(std::string_view text);

 private:
  bool IsSelfIp(const std::string& canonical) const;

  std::string listen_ip_;  // canonical
  bool listen_any_ = false;
  bool listen_loopback_ = false;
  uint16_t listen_port_ = 0;
  std::vector<std::string> local_;  // canonical
};

}  // namespace infera::discovery
