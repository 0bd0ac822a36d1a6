// Validation steps of the router's identity and access: replica sync, tenant salts,
// the admin token (doc/router.md "Admin token", "Tenant isolation").
#include <string>

#include "router/admin/admin_auth.h"
#include "router/config/identity.h"
#include "router/config/validate.h"
#include "router/request/tenant_salt.h"
#include "spdlog/spdlog.h"

namespace infera::router::config {
namespace {

// Which of --admin-token and --admin-token-file wins: both given, the command line's
// beats the config file's; twice in one place is an error (CLI11's excludes() cannot
// tell the two places apart).
absl::StatusOr<bool> UseTokenFile(const RouterFlags& f) {
  const bool file_given = f.token_file_flag->count() > 0;
  if (!file_given || f.token_flag->count() == 0) return file_given;
  const bool file_cli = f.OnCommandLine("--admin-token-file");
  if (file_cli == f.OnCommandLine("--admin-token")) {
    return FlagError("give only one of --admin-token and --admin-token-file");
  }
  return file_cli;
}

}  // namespace

absl::Status ResolveReplicaSync(RouterFlags& f, const ConfigSources& sources) {
  if (!f.replica_sync) return absl::OkStatus();
  ResolveReplicaIdentity(f.replica, sources);
  f.replica.nats_url = f.options.nats_server;
  if (absl::Status s = ValidateReplicaSyncOptions(f.replica); !s.ok()) {
    return FlagError(MessageOf(s));
  }
  f.options.replica_sync = f.replica;
  return absl::OkStatus();
}

absl::Status ResolveTenantSalt(RouterFlags& f, const ConfigSources& sources) {
  if (f.tenant_salt_spec.empty()) {
    if (!f.tenant_salt_key_file.empty()) {
      return FlagError("--tenant-cache-salt-key-file needs --tenant-cache-salt");
    }
    return absl::OkStatus();
  }
  auto header = ParseTenantSaltSpec(f.tenant_salt_spec);
  if (!header.ok()) return FlagError(MessageOf(header.status()));
  f.options.tenant_salt_header = *header;
  if (!f.tenant_salt_key_file.empty()) {
    auto key = ReadTenantSaltKeyFile(f.tenant_salt_key_file);
    if (!key.ok()) return FlagError(MessageOf(key.status()));
    f.options.tenant_salt_key = *key;
    return absl::OkStatus();
  }
  f.options.tenant_salt_key = RandomTenantSaltKey(sources);
  spdlog::warn(
      "--tenant-cache-salt without --tenant-cache-salt-key-file: a random key; tenants' "
      "salts change when the router restarts and differ between replicas");
  return absl::OkStatus();
}

absl::Status ResolveAdminToken(RouterFlags& f, const ConfigSources& sources) {
  absl::StatusOr<bool> use_token_file = UseTokenFile(f);
  if (!use_token_file.ok()) return use_token_file.status();
  std::string& token = f.options.admin_token;
  if (*use_token_file) {
    auto read = ReadAdminTokenFile(f.admin_token_file);
    if (!read.ok()) return FlagError(MessageOf(read.status()));
    token = *std::move(read);
  } else if (f.token_flag->count() > 0) {
    token = f.admin_token;
  } else if (auto env = sources.NonEmptyEnv("INFERA_ADMIN_TOKEN")) {
    token = *env;
  }
  // --admin-token "" is an error, not "off".
  if (!token.empty() || (f.token_flag->count() > 0 && !*use_token_file)) {
    if (absl::Status s = ValidateAdminToken(token); !s.ok()) {
      return FlagError("--admin-token (or INFERA_ADMIN_TOKEN): " + MessageOf(s));
    }
    spdlog::info("router: admin token set: /v1/admin/*, /v1/workers, /dashboard{} need it",
                 f.protect_metrics ? " and /metrics" : "");
  } else if (f.protect_metrics) {
    return FlagError(
        "--protect-metrics needs an admin token (--admin-token, --admin-token-file or "
        "INFERA_ADMIN_TOKEN)");
  } else if (!IsLoopbackHost(f.host)) {
    spdlog::warn(
        "router: no admin token and listening on {}: /v1/admin/*, /v1/workers and /dashboard "
        "(the fleet's internal URLs and endpoints) are open to every client that reaches it; "
        "set --admin-token-file or INFERA_ADMIN_TOKEN",
        f.host);
  }
  return absl::OkStatus();
}

}  // namespace infera::router::config
