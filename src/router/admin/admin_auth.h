// AdminAuth: the admin token (doc/router.md "Admin token").
//
//   --admin-token T | --admin-token-file F | env INFERA_ADMIN_TOKEN   (off: no token)
//   protected paths: /v1/admin*, /v1/workers*, /dashboard*, and /metrics with
//                    --protect-metrics; /health, /ready and the inference API never
//   a request to a protected path passes only with `Authorization: Bearer T`
//   (scheme case-insensitive); else 401 with `WWW-Authenticate: Bearer`.
//
// The token is kept only as its SHA-256 digest; a presented token is hashed and the two
// digests compared with CRYPTO_memcmp, so the time taken depends neither on where the
// two differ nor on the token's length. Nothing here logs.
//
// Thread-safety: immutable after construction; every method is const.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace infera::router {

class AdminAuth {
 public:
  // Off: every path is open.
  AdminAuth() = default;
  // REQUIRES: ValidateAdminToken(token) is ok.
  AdminAuth(std::string_view token, bool protect_metrics);

  bool enabled() const { return enabled_; }
  // Whether `path` (no query) needs the token.
  bool Protects(std::string_view path) const;
  // Whether `authorization` (the Authorization header's value) carries the token.
  // False when off (nothing to carry).
  bool Allows(std::string_view authorization) const;

 private:
  bool enabled_ = false;
  bool protect_metrics_ = false;
  std::array<unsigned char, 32> digest_{};
};

// A token is 1 to 4096 visible ASCII characters (RFC 6750's b64token and more; no
// spaces, so it survives the header and a file's trailing newline).
absl::Status ValidateAdminToken(std::string_view token);
// --admin-token-file: the file's content without trailing whitespace, validated. The
// errors name the file, never its content.
absl::StatusOr<std::string> ReadAdminTokenFile(const std::string& path);
// Whether a --host value is a loopback address (127.0.0.0/8, ::1, localhost): without a
// token the admin paths are then reachable from this machine only.
bool IsLoopbackHost(std::string_view host);

}  // namespace infera::router
