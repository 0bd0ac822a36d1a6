// TenantSalt: per-tenant cache_salt for --tenant-cache-salt header:NAME
// (doc/router.md "Tenant isolation", doc/hashing.md "Extra keys").
//
// vLLM isolates prefix caches with the request field `cache_salt`: it enters the
// first block's hash, so requests with other salts never share a cached block and
// never see each other's prefixes in `cached_tokens`. With the option on, the router
// gives every request the salt of its tenant, the value of header NAME (e.g. the
// API key in Authorization), and sends it to the engine in the body:
//
//   salt = base64url_nopad(HMAC-SHA256(key, message))           43 characters
//   message = "infera-tenant-cache-salt/v1" || 0x00
//             || tenant:      0x00 (no header) | 0x01 || u32 LE length || bytes
//             || client salt: 0x00 (none)      | 0x01 || u32 LE length || bytes
//
// The key is secret (--tenant-cache-salt-key-file, else random per process), so a
// salt cannot be computed, or guessed, from outside. A client's own cache_salt only
// partitions its tenant further: it is an input of the HMAC, never the salt itself,
// so no tenant can choose another tenant's salt. A request without the header
// belongs to the tenant "no header" (all such requests share among themselves).
//
// Thread-safety: immutable after construction; Derive may run on any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace infera::router {

// The shortest key accepted (bytes).
inline constexpr size_t kMinTenantSaltKeyBytes = 16;

// "header:NAME" -> NAME (an HTTP token), else InvalidArgument naming the problem.
absl::StatusOr<std::string> ParseTenantSaltSpec(std::string_view spec);

// The key in `path`: its bytes, at least kMinTenantSaltKeyBytes (one trailing newline
// is not part of it); else an error naming the file.
absl::StatusOr<std::string> ReadTenantSaltKeyFile(const std::string& path);

// `body` (a JSON object, as parsed) with its top-level cache_salt set to `salt`. When
// the body has none (`body_has_salt` false) the field is spliced in after the opening
// brace, a copy of the bytes with no re-serialisation; otherwise the body is parsed
// and re-serialised with the value replaced (one key, never a duplicate).
std::string WithCacheSalt(std::string body, std::string_view salt, bool body_has_salt);

class TenantSalt {
 public:
  // REQUIRES: header is a valid header name, key.size() >= kMinTenantSaltKeyBytes.
  TenantSalt(std::string header, std::string key);

  const std::string& header() const { return header_; }
  // The salt of a request of `tenant` (nullopt: no header) with the client's own
  // `client_salt` (nullopt: none).
  std::string Derive(std::optional<std::string_view> tenant,
                     std::optional<std::string_view> client_salt) const;

 private:
  const std::string header_;
  const std::string key_;
};

}  // namespace infera::router
