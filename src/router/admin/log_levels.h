// LogLevels: which log lines the router writes, from `--log-level` or, when the flag
// is not given, from RUST_LOG (the variable the spec sets for Infera's Rust router:
// `RUST_LOG=info,infera_router::decode_demand=debug`). doc/router.md "Logging".
//
//   auto levels = ResolveLogLevels(flag_given ? std::optional(flag) : std::nullopt,
//                                  std::getenv("RUST_LOG"));
//   if (!levels.ok()) { /* exit 2 with levels.status() */ }
//   ApplyLogLevels(*levels);
//
// Syntax (tracing_subscriber's EnvFilter, which both spellings share): directives
// separated by commas, each `LEVEL`, `TARGET=LEVEL` or `TARGET` (= trace); LEVEL is
// trace, debug, info, warn, error, off (any case; also 0..5 = off..trace, and
// spdlog's warning, err, critical). A more specific target wins over a less specific
// one whatever their order; a later directive for the same target wins.
//
// Targets: the router's own loggers by their name (`decode_demand`, `discovery_k8s`)
// or by the module path Infera's Rust router logs them under
// (`infera_router::decode_demand`, `infera_router::discovery_k8s`); `infera_router`
// names the whole router (the default logger and every named one). The crates
// Infera's Rust router links (hyper, tokio, reqwest, async_nats ...) have no
// counterpart here: accepted and reported in `ignored`. Any other target is an
// InvalidArgument naming the targets there are — never silently ignored.
//
// What is not set: with `--log-level` everything else stays at info (spdlog's
// default); with RUST_LOG, as in EnvFilter, lines of no named target are dropped —
// except errors (EnvFilter would drop those too; a router exiting on a bad flag must
// still say why).
//
// Thread-safety: ParseLogLevels is pure; ApplyLogLevels changes spdlog's registry
// (call it at start-up, before other threads log).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "spdlog/common.h"

namespace infera::router {

enum class LogSyntax : uint8_t { kFlag, kRustLog };

struct LogLevels {
  spdlog::level::level_enum default_level = spdlog::level::info;
  // Named loggers with a level other than default_level's source.
  std::vector<std::pair<std::string, spdlog::level::level_enum>> loggers;
  // Third-party targets accepted but without a counterpart here.
  std::vector<std::string> ignored;
  std::string source;  // "--log-level", "RUST_LOG" or "default"
};

// The router's named loggers, each with the target Infera's Rust router uses.
struct LogTarget {
  const char* logger;       // spdlog logger name
  const char* infera_name;  // tracing target in Infera's Rust router
};
const std::vector<LogTarget>& KnownLogTargets();

absl::StatusOr<LogLevels> ParseLogLevels(std::string_view spec, LogSyntax syntax);

// `--log-level` when given, else RUST_LOG when set and not empty, else info.
absl::StatusOr<LogLevels> ResolveLogLevels(const std::optional<std::string>& flag,
                                           const char* rust_log);

void ApplyLogLevels(const LogLevels& levels);

}  // namespace infera::router
