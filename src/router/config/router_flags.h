// RouterFlags: infera-router's command line and --config file, parsed into RouterOptions
// (doc/router.md "Flags", "Configuration file"; README.md of this folder).
//
//   RouterFlags flags;
//   CLI::App app{kRouterDescription};
//   AddRouterFlags(app, flags);                       // every flag group, then --config
//   if (auto code = ParseRouterFlags(app, flags, argc, argv)) return *code;
//   absl::Status s = ValidateRouterFlags(flags, ConfigSources::Process());  // validate.h
//   // s.ok(): flags.options is the router's configuration; else exit 2 with s.message()
//
// The flags are bound to the members below as CLI11 parses them; the raw values that
// need a check or a conversion are kept apart from `options` until ValidateRouterFlags.
//
// Thread-safety: one thread; REQUIRES: `flags` is neither moved nor copied after
// AddRouterFlags (CLI11 holds pointers into it).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "discovery/discovery_flags.h"
#include "doctor/startup_doctor.h"
#include "router/router.h"
#include "transport/nats_request_flags.h"

namespace infera::router::config {

extern const char kRouterDescription[];

struct RouterFlags {
  RouterFlags() { discovery.backend = "static"; }
  RouterFlags(const RouterFlags&) = delete;
  RouterFlags& operator=(const RouterFlags&) = delete;

  RouterOptions options;  // the result; flags without a check are bound here directly
  discovery::DiscoveryConfig discovery;
  doctor::StartupDoctorOptions startup_doctor;
  transport::NatsRequestFlags nats_request_flags;
  ReplicaSyncOptions replica;
  std::vector<std::string> args;  // argv[1..]: which of two flags the command line gave

  // Raw values, checked and converted by ValidateRouterFlags.
  std::string host = "0.0.0.0";
  int port = 8000;
  std::string policy = "kv-aware";
  std::string load_term = "work";
  double prefill_overlap_weight = -1, decode_overlap_weight = -1;
  std::string kv_transport = "zmq";
  std::string request_transport = "http";
  std::string log_level = "info";
  uint64_t random_seed = 0;
  uint64_t max_body_bytes = RouterOptions{}.server.max_body_bytes;
  uint32_t max_header_bytes = RouterOptions{}.server.max_header_bytes;
  std::string pd_guard_release = "completion";
  std::string session_affinity = "off";
  double session_ttl_s = 3600;
  std::string demand_mode, demand_weight;
  double parity_interval_s = 300;
  double approx_ttl_s = 120;
  bool replica_sync = false;
  std::string tenant_salt_spec, tenant_salt_key_file;
  size_t max_index_blocks = 0;
  int64_t nats_max_pending = 0;
  std::string router_backend;
  std::string admin_token, admin_token_file;
  bool protect_metrics = false;
  std::string admission_queue = "auto";
  size_t queue_max = core::QueueConfig{}.max_queued;
  double queue_max_wait_s = static_cast<double>(core::QueueConfig{}.max_wait_ns) / 1e9;

  // The flags whose absence matters (an environment fallback, an optional value).
  CLI::Option* demand_flag = nullptr;
  CLI::Option* weight_flag = nullptr;
  CLI::Option* seed_flag = nullptr;
  CLI::Option* nats_flag = nullptr;
  CLI::Option* bound_flag = nullptr;
  CLI::Option* nats_pending_flag = nullptr;
  CLI::Option* log_flag = nullptr;
  CLI::Option* backend_flag = nullptr;
  CLI::Option* token_flag = nullptr;
  CLI::Option* token_file_flag = nullptr;
  CLI::Option* config_flag = nullptr;
  CLI::Option* snapshot_fleet_flag = nullptr;

  // True when the command line itself (not the --config file) gave `name`.
  bool OnCommandLine(std::string_view name) const;
};

// Adds every flag group of flag_table.cc to `app`, in --help's order, then --config
// and the help's footer.
void AddRouterFlags(CLI::App& app, RouterFlags& flags);

// Parses the command line (and the --config file it names). nullopt: go on; else the
// process's exit code (--help: 0; a flag error: CLI11's; a --config error: 2, logged).
std::optional<int> ParseRouterFlags(CLI::App& app, RouterFlags& flags, int argc, char** argv);

// The flag groups: each adds the flags of one topic (flags_*.cc), in --help's order.
void AddListenFlags(CLI::App& app, RouterFlags& flags);
void AddPolicyFlags(CLI::App& app, RouterFlags& flags);
void AddCostFlags(CLI::App& app, RouterFlags& flags);
void AddPromptFlags(CLI::App& app, RouterFlags& flags);
void AddDiscoveryGroup(CLI::App& app, RouterFlags& flags);
void AddKvEventFlags(CLI::App& app, RouterFlags& flags);
void AddReplicaFlags(CLI::App& app, RouterFlags& flags);
void AddViewFlags(CLI::App& app, RouterFlags& flags);
void AddTenantFlags(CLI::App& app, RouterFlags& flags);
void AddRequestTransportFlags(CLI::App& app, RouterFlags& flags);
void AddFailoverFlags(CLI::App& app, RouterFlags& flags);
void AddHealthFlags(CLI::App& app, RouterFlags& flags);
void AddInferaAliasFlags(CLI::App& app, RouterFlags& flags);
void AddLimitFlags(CLI::App& app, RouterFlags& flags);
void AddOperationFlags(CLI::App& app, RouterFlags& flags);
void AddAdminFlags(CLI::App& app, RouterFlags& flags);
void AddAdmissionFlags(CLI::App& app, RouterFlags& flags);
void AddKvSnapshotFlags(CLI::App& app, RouterFlags& flags);

}  // namespace infera::router::config
