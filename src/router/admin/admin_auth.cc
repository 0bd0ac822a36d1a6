#include "router/admin/admin_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <fstream>

namespace infera::router {
namespace {

constexpr size_t kMaxTokenBytes = 4096;
constexpr std::string_view kProtectedPrefixes[] = {"/v1/admin", "/v1/workers", "/dashboard"};

std::array<unsigned char, 32> Sha256(std::string_view data) {
  std::array<unsigned char, 32> out{};
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &n, EVP_sha256(), nullptr);
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

}  // namespace

AdminAuth::AdminAuth(std::string_view token, bool protect_metrics)
    : enabled_(true), protect_metrics_(protect_metrics), digest_(Sha256(token)) {}

bool AdminAuth::Protects(std::string_view path) const {
  if (!enabled_) return false;
  if (protect_metrics_ && path == "/metrics") return true;
  for (std::string_view prefix : kProtectedPrefixes) {
    if (path.starts_with(prefix)) return true;
  }
  return false;
}

bool AdminAuth::Allows(std::string_view authorization) const {
  if (!enabled_) return false;
  // credentials = auth-scheme 1*SP token68 (RFC 9110 §11.4); the scheme is
  // case-insensitive.
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    const char c = authorization[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != kScheme[i]) return false;
  }
  std::string_view presented = authorization.substr(kScheme.size());
  if (!IsSpace(presented.front())) return false;
  while (!presented.empty() && IsSpace(presented.front())) presented.remove_prefix(1);
  while (!presented.empty() && IsSpace(presented.back())) presented.remove_suffix(1);
  if (presented.empty()) return false;
  const std::array<unsigned char, 32> digest = Sha256(presented);
  return CRYPTO_memcmp(digest.data(), digest_.data(), digest.size()) == 0;
}

absl::Status ValidateAdminToken(std::string_view token) {
  if (token.empty()) return absl::InvalidArgumentError("the admin token is empty");
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError("the admin token is over 4096 bytes");
  }
  for (char c : token) {
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(
          "the admin token must be visible ASCII characters only (no spaces or control "
          "characters)");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadAdminTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("--admin-token-file: cannot open " + path);
  std::string token;
  token.resize(kMaxTokenBytes + 2);
  in.read(token.data(), static_cast<std::streamsize>(token.size()));
  token.resize(static_cast<size_t>(in.gcount()));
  if (in.peek() != std::ifstream::traits_type::eof()) {
    return absl::InvalidArgumentError("--admin-token-file " + path + " is over 4096 bytes");
  }
  while (!token.empty() &&
         (token.back() == '\n' || token.back() == '\r' || IsSpace(token.back()))) {
    token.pop_back();
  }
  if (absl::Status s = ValidateAdminToken(token); !s.ok()) {
    return absl::InvalidArgumentError("--admin-token-file " + path + ": " +
                                      std::string(s.message()));
  }
  return token;
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  // 127.0.0.0/8 written as a dotted quad.
  if (!host.starts_with("127.")) return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

}  // namespace infera::router
