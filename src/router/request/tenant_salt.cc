#include "router/request/tenant_salt.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

namespace infera::router {
namespace {

// RFC 9110 token characters.
bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

void AppendPart(std::string& out, std::optional<std::string_view> part) {
  if (!part) {
    out.push_back('\0');
    return;
  }
  out.push_back('\1');
  const uint32_t n = static_cast<uint32_t>(part->size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(*part);
}

std::string Base64UrlNoPad(const unsigned char* data, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve((n * 4 + 2) / 3);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b0 = data[i];
    const uint32_t b1 = i + 1 < n ? data[i + 1] : 0;
    const uint32_t b2 = i + 2 < n ? data[i + 2] : 0;
    const uint32_t v = (b0 << 16) | (b1 << 8) | b2;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    if (i + 1 < n) out.push_back(kAlphabet[(v >> 6) & 63]);
    if (i + 2 < n) out.push_back(kAlphabet[v & 63]);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ParseTenantSaltSpec(std::string_view spec) {
  constexpr std::string_view kPrefix = "header:";
  if (spec.substr(0, kPrefix.size()) != kPrefix) {
    return absl::InvalidArgumentError("--tenant-cache-salt must be header:NAME, got '" +
                                      std::string(spec) + "'");
  }
  const std::string_view name = spec.substr(kPrefix.size());
  if (name.empty()) return absl::InvalidArgumentError("--tenant-cache-salt header:NAME: no NAME");
  for (char c : name) {
    if (!IsTokenChar(c)) {
      return absl::InvalidArgumentError("--tenant-cache-salt: '" + std::string(name) +
                                        "' is not a header name");
    }
  }
  return std::string(name);
}

absl::StatusOr<std::string> ReadTenantSaltKeyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("--tenant-cache-salt-key-file: cannot open " + path);
  std::string key;
  constexpr size_t kMaxBytes = 4096;
  key.resize(kMaxBytes + 1);
  in.read(key.data(), static_cast<std::streamsize>(key.size()));
  key.resize(static_cast<size_t>(in.gcount()));
  if (key.size() > kMaxBytes) {
    return absl::InvalidArgumentError("--tenant-cache-salt-key-file: " + path +
                                      " is over 4096 bytes");
  }
  if (!key.empty() && key.back() == '\n') key.pop_back();
  if (!key.empty() && key.back() == '\r') key.pop_back();
  if (key.size() < kMinTenantSaltKeyBytes) {
    return absl::InvalidArgumentError("--tenant-cache-salt-key-file: " + path + " holds " +
                                      std::to_string(key.size()) + " bytes; at least " +
                                      std::to_string(kMinTenantSaltKeyBytes) + " are needed");
  }
  return key;
}

std::string WithCacheSalt(std::string body, std::string_view salt, bool body_has_salt) {
  const std::string value = nlohmann::json(std::string(salt)).dump();
  if (body_has_salt) {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return body;  // REQUIRES violated: left as it is
    j["cache_salt"] = std::string(salt);
    return j.dump();
  }
  const size_t brace = body.find_first_not_of(" \t\r\n");
  if (brace == std::string::npos || body[brace] != '{') return body;
  const size_t next = body.find_first_not_of(" \t\r\n", brace + 1);
  const bool empty = next != std::string::npos && body[next] == '}';
  body.insert(brace + 1, "\"cache_salt\":" + value + (empty ? "" : ","));
  return body;
}

TenantSalt::TenantSalt(std::string header, std::string key)
    : header_(std::move(header)), key_(std::move(key)) {
  if (key_.size() < kMinTenantSaltKeyBytes) std::abort();  // REQUIRES violated
}

std::string TenantSalt::Derive(std::optional<std::string_view> tenant,
                               std::optional<std::string_view> client_salt) const {
  std::string message = "infera-tenant-cache-salt/v1";
  message.push_back('\0');
  AppendPart(message, tenant);
  AppendPart(message, client_salt);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &mac_len);
  return Base64UrlNoPad(mac, mac_len);
}

}  // namespace infera::router
