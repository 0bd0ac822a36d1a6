// The router's flag groups in --help's order, its description and --config footer, and
// the parse (router_flags.h). A new flag is one line in the group of its topic; a new
// topic is one entry here (README.md).
#include <memory>
#include <string_view>

#include "router/config/config_file.h"
#include "router/config/router_flags.h"
#include "spdlog/spdlog.h"

namespace infera::router::config {
namespace {

struct FlagGroup {
  std::string_view topic;
  void (*add)(CLI::App& app, RouterFlags& flags);
};

// The flag groups, in the order --help lists them.
constexpr FlagGroup kFlagGroups[] = {
    {"listen", AddListenFlags},
    {"policy", AddPolicyFlags},
    {"cost", AddCostFlags},
    {"prompts", AddPromptFlags},
    {"discovery", AddDiscoveryGroup},
    {"kv events", AddKvEventFlags},
    {"replica sync", AddReplicaFlags},
    {"views", AddViewFlags},
    {"tenants", AddTenantFlags},
    {"request transport", AddRequestTransportFlags},
    {"failover", AddFailoverFlags},
    {"health", AddHealthFlags},
    {"infera aliases", AddInferaAliasFlags},
    {"limits", AddLimitFlags},
    {"operation", AddOperationFlags},
    {"admin", AddAdminFlags},
    {"admission queue", AddAdmissionFlags},
    {"kv snapshots", AddKvSnapshotFlags},
};

// --help's footer and doc/router.md "Configuration file" (the config test loads both).
constexpr char kConfigFooter[] =
    R"(Configuration file (--config FILE, TOML): each key is a flag's long name without
"--"; flags on the command line override the file, the file overrides environment
variables (INFERA_ADMIN_TOKEN, NATS_SERVER, RUST_LOG, ...). An unknown key, a key set
twice or malformed TOML is an error naming its line. Example:

  # /etc/infera-router/config.toml
  host = "0.0.0.0"
  port = 8000
  router-policy = "kv-aware"
  kv-overlap-weight = 1.0
  router-tokenizer-path = "/models/tokenizer"
  worker = ["http://10.0.0.1:30000,model_name=m,kv_events_endpoint=tcp://10.0.0.1:5557",
            "http://10.0.0.2:30000,model_name=m,kv_events_endpoint=tcp://10.0.0.2:5557"]
  kv-events-topic = "kv-events"
  admin-token-file = "/etc/infera-router/admin-token"
  log-level = "info"
)";

}  // namespace

const char kRouterDescription[] =
    "infera-router: KV-cache-aware router for LLM inference workers (OpenAI and Anthropic "
    "HTTP API).\nSubcommands: `infera-router render --help` renders chat templates; "
    "`infera-router doctor --help` checks a fleet for the causes of missing cache hits.";

void AddRouterFlags(CLI::App& app, RouterFlags& flags) {
  for (const FlagGroup& group : kFlagGroups) group.add(app, flags);
  // --config FILE (doc/router.md "Configuration file").
  flags.config_flag =
      app.set_config("--config", "", "TOML file of flags (see the end of this help)")
          ->type_name("FILE");
  app.config_formatter(std::make_shared<StrictTomlConfig>(app));
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.footer(kConfigFooter);
}

std::optional<int> ParseRouterFlags(CLI::App& app, RouterFlags& flags, int argc, char** argv) {
  flags.args.assign(argv + 1, argv + argc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    spdlog::error("--config {}: {}", flags.config_flag->as<std::string>(), e.what());
    return 2;
  } catch (const CLI::FileError& e) {
    spdlog::error("--config: {}", e.what());
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

bool RouterFlags::OnCommandLine(std::string_view name) const {
  for (const std::string& arg : args) {
    if (arg == name ||
        (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=')) {
      return true;
    }
  }
  return false;
}

}  // namespace infera::router::config
