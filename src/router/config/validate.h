// ValidateRouterFlags: the router's flag checks and conversions, after the parse
// (router_flags.h), as a table of steps run in order (validate.cc). Each step checks
// and converts a few flags into RouterFlags::options, reading the environment,
// randomness and the clock only through ConfigSources; the first failing step's status
// carries the exact message the router exits with (status 2). Steps also log what the
// router logs at start (the resolved tokenizer, an admin token that is set, ...).
//
// Thread-safety: one thread; the log-level step changes spdlog's registry.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "router/config/config_sources.h"
#include "router/config/router_flags.h"

namespace infera::router::config {

struct ValidationStep {
  std::string_view flags;  // what it checks, for the reader
  absl::Status (*run)(RouterFlags& flags, const ConfigSources& sources);
};

// Runs every step; on an error, the router exits 2 after logging its message.
absl::Status ValidateRouterFlags(RouterFlags& flags, const ConfigSources& sources);

// Steps of validate_access.cc (identity, tenants, the admin token).
absl::Status ResolveReplicaSync(RouterFlags& flags, const ConfigSources& sources);
absl::Status ResolveTenantSalt(RouterFlags& flags, const ConfigSources& sources);
absl::Status ResolveAdminToken(RouterFlags& flags, const ConfigSources& sources);
// The step of flags_admission.cc (--admission-queue, --queue-*).
absl::Status ParseAdmissionFlags(RouterFlags& flags, const ConfigSources& sources);
// Step of flags_snapshot.cc.
absl::Status ResolveKvSnapshot(RouterFlags& flags, const ConfigSources& sources);

// InvalidArgument(message): a step's error, logged as it is.
absl::Status FlagError(std::string_view message);
// A status's message alone (without its code).
std::string MessageOf(const absl::Status& status);

}  // namespace infera::router::config
