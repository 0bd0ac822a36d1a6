#include "discovery/self_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace infera::discovery {
namespace {

bool IsLoopback(const std::string& ip) { return ip == "::1" || ip.starts_with("127."); }
bool IsAny(const std::string& ip) { return ip == "0.0.0.0" || ip == "::"; }

// Canonical text of a socket address ("" for other families).
std::string TextOf(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) == nullptr) return "";
    return buf;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf)) == nullptr) return "";
    return SelfAddress::CanonicalIp(buf);
  }
  return "";
}

}  // namespace

std::string SelfAddress::CanonicalIp(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  const std::string s(text);
  char buf[INET6_ADDRSTRLEN] = {};
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    return inet_ntop(AF_INET, &v4, buf, sizeof(buf)) != nullptr ? std::string(buf) : "";
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, s.c_str(), &v6) != 1) return "";
  if (IN6_IS_ADDR_V4MAPPED(&v6)) {
    std::memcpy(&v4, &v6.s6_addr[12], 4);
    return inet_ntop(AF_INET, &v4, buf, sizeof(buf)) != nullptr ? std::string(buf) : "";
  }
  return inet_ntop(AF_INET6, &v6, buf, sizeof(buf)) != nullptr ? std::string(buf) : "";
}

SelfAddress::SelfAddress(std::string listen_host, uint16_t listen_port,
                         std::vector<std::string> local_addresses)
    : listen_port_(listen_port) {
  listen_ip_ = CanonicalIp(listen_host);
  if (listen_ip_.empty()) listen_ip_ = listen_host;  // a name: compared as given
  listen_any_ = IsAny(listen_ip_);
  listen_loopback_ = IsLoopback(listen_ip_) || listen_host == "localhost";
  for (const std::string& a : local_addresses) {
    std::string c = CanonicalIp(a);
    if (!c.empty()) local_.push_back(std::move(c));
  }
}

SelfAddress SelfAddress::ForListen(std::string listen_host, uint16_t listen_port) {
  std::vector<std::string> local;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (const ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr) continue;
      std::string text = TextOf(it->ifa_addr);
      if (!text.empty()) local.push_back(std::move(text));
    }
    freeifaddrs(list);
  }
  return SelfAddress(std::move(listen_host), listen_port, std::move(local));
}

bool SelfAddress::IsSelfIp(const std::string& ip) const {
  if (ip == listen_ip_) return true;
  if (listen_any_) {
    return IsAny(ip) || IsLoopback(ip) ||
           std::find(local_.begin(), local_.end(), ip) != local_.end();
  }
  return listen_loopback_ && IsAny(ip);
}

bool SelfAddress::PointsAtSelf(std::string_view host, uint16_t port) const {
  if (port != listen_port_ || listen_port_ == 0) return false;
  if (std::string ip = CanonicalIp(host); !ip.empty()) return IsSelfIp(ip);
  std::string name(host);
  if (name == listen_ip_) return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return false;
  bool self = false;
  for (const addrinfo* it = res; it != nullptr && !self; it = it->ai_next) {
    std::string ip = TextOf(it->ai_addr);
    self = !ip.empty() && IsSelfIp(ip);
  }
  freeaddrinfo(res);
  return self;
}

}  // namespace infera::discovery
