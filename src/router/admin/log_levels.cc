#include "router/admin/log_levels.h"

#include <algorithm>
#include <cctype>

#include "spdlog/details/registry.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

using Level = spdlog::level::level_enum;

constexpr std::string_view kCrate = "infera_router";

// Crates Infera's Rust router links (rust/router/Cargo.toml) and their common
// transitive ones: a RUST_LOG written for it may name them.
constexpr std::string_view kForeignCrates[] = {
    "async_nats", "axum",       "h2",      "hyper",  "hyper_util", "minijinja",
    "mio",        "onig",       "reqwest", "rustls", "tokenizers", "tokio",
    "tower",      "tower_http", "tracing", "want",   "zmq"};

// Debian's abseil has its own absl::string_view (not std::string_view): these few
// string helpers stay on the standard library.
std::string Lower(std::string_view text) {
  std::string s(text);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  (out.append(parts), ...);
  return out;
}

std::optional<Level> ParseLevel(std::string_view text) {
  const std::string s = Lower(text);
  if (s.size() == 1 && s[0] >= '0' && s[0] <= '5') {
    static constexpr Level kByDigit[] = {spdlog::level::off,   spdlog::level::err,
                                         spdlog::level::warn,  spdlog::level::info,
                                         spdlog::level::debug, spdlog::level::trace};
    return kByDigit[s[0] - '0'];
  }
  if (s == "trace") return spdlog::level::trace;
  if (s == "debug") return spdlog::level::debug;
  if (s == "info") return spdlog::level::info;
  if (s == "warn" || s == "warning") return spdlog::level::warn;
  if (s == "error" || s == "err") return spdlog::level::err;
  if (s == "critical") return spdlog::level::critical;
  if (s == "off") return spdlog::level::off;
  return std::nullopt;
}

std::string KnownTargetsText() {
  std::string out;
  for (const LogTarget& t : KnownLogTargets()) {
    out += Cat(std::string_view(t.logger), " (", std::string_view(t.infera_name), "), ");
  }
  return out + Cat(kCrate, " (the whole router)");
}

}  // namespace

const std::vector<LogTarget>& KnownLogTargets() {
  static const std::vector<LogTarget> kTargets = {
      {"decode_demand", "infera_router::decode_demand"},
      {"discovery_k8s", "infera_router::discovery_k8s"},
  };
  return kTargets;
}

absl::StatusOr<LogLevels> ParseLogLevels(std::string_view spec, LogSyntax syntax) {
  LogLevels out;
  out.source = syntax == LogSyntax::kFlag ? "--log-level" : "RUST_LOG";
  const std::string what = syntax == LogSyntax::kFlag ? "--log-level" : "RUST_LOG";
  std::optional<Level> bare, crate;
  std::vector<std::optional<Level>> named(KnownLogTargets().size());
  for (size_t start = 0; start <= spec.size();) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view directive = Trim(spec.substr(start, comma - start));
    start = comma + 1;
    if (directive.empty()) continue;
    if (directive.find_first_of("[]{}") != std::string_view::npos) {
      return absl::InvalidArgumentError(
          Cat(what, ": '", directive, "': span and field filters are not supported"));
    }
    const size_t eq = directive.find('=');
    std::string_view target = directive.substr(0, eq);
    std::optional<Level> level = spdlog::level::trace;  // a bare target: everything
    if (eq != std::string_view::npos) {
      level = ParseLevel(directive.substr(eq + 1));
      if (!level) {
        return absl::InvalidArgumentError(
            Cat(what, ": '", directive.substr(eq + 1),
                "' is not a level (trace, debug, info, warn, error, off) in '", directive, "'"));
      }
    } else if (std::optional<Level> plain = ParseLevel(directive)) {
      bare = plain;
      continue;
    }
    if (target == kCrate) {
      crate = level;
      continue;
    }
    bool matched = false;
    for (size_t i = 0; i < KnownLogTargets().size(); ++i) {
      const LogTarget& t = KnownLogTargets()[i];
      if (target == t.logger || target == t.infera_name) {
        named[i] = level;
        matched = true;
      }
    }
    if (matched) continue;
    const std::string_view crate_name = target.substr(0, target.find("::"));
    if (std::find(std::begin(kForeignCrates), std::end(kForeignCrates), crate_name) !=
        std::end(kForeignCrates)) {
      out.ignored.emplace_back(target);
      continue;
    }
    if (crate_name == kCrate) {
      return absl::InvalidArgumentError(
          Cat(what, ": '", target,
              "' has no logger of its own in this router (its lines follow the default level); "
              "log targets: ",
              KnownTargetsText()));
    }
    return absl::InvalidArgumentError(
        Cat(what, ": unknown log target '", target, "'; log targets: ", KnownTargetsText(),
            "; or a level alone (trace, debug, info, warn, error, off)"));
  }
  // RUST_LOG naming no default: EnvFilter would drop every other line; errors are kept,
  // so a router that exits on a bad flag still says why.
  const Level unset = syntax == LogSyntax::kFlag ? spdlog::level::info : spdlog::level::err;
  out.default_level = crate.value_or(bare.value_or(unset));
  for (size_t i = 0; i < named.size(); ++i) {
    out.loggers.emplace_back(KnownLogTargets()[i].logger,
                             named[i].value_or(crate.value_or(bare.value_or(unset))));
  }
  return out;
}

absl::StatusOr<LogLevels> ResolveLogLevels(const std::optional<std::string>& flag,
                                           const char* rust_log) {
  if (flag) return ParseLogLevels(*flag, LogSyntax::kFlag);
  if (rust_log != nullptr && *rust_log != '\0')
    return ParseLogLevels(rust_log, LogSyntax::kRustLog);
  auto levels = ParseLogLevels("info", LogSyntax::kFlag);
  if (levels.ok()) levels->source = "default";
  return levels;
}

void ApplyLogLevels(const LogLevels& levels) {
  Level global = levels.default_level;
  spdlog::details::registry::log_levels by_name;
  for (const auto& [name, level] : levels.loggers) by_name[name] = level;
  spdlog::details::registry::instance().set_levels(std::move(by_name), &global);
}

}  // namespace infera::router
