// The router's flag checks without the process: a fixed environment, counted
// randomness and a fixed clock (ConfigSources::Fixed).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "router/config/identity.h"
#include "router/config/router_flags.h"
#include "router/config/validate.h"

namespace infera::router::config {
namespace {

using Env = std::map<std::string, std::string>;

constexpr uint32_t kRandomWord = 0x2a;
constexpr int64_t kUnixMs = 1'700'000'000'123;

// The flags of `args` after parse and validation; `status` is the validation's.
struct Configured {
  std::unique_ptr<RouterFlags> flags = std::make_unique<RouterFlags>();
  CLI::App app{kRouterDescription};
  absl::Status status;
};

std::unique_ptr<Configured> Configure(std::vector<std::string> args, Env env = {}) {
  auto c = std::make_unique<Configured>();
  AddRouterFlags(c->app, *c->flags);
  args.insert(args.begin(), "infera-router");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  const std::optional<int> exit_code =
      ParseRouterFlags(c->app, *c->flags, static_cast<int>(argv.size()), argv.data());
  EXPECT_FALSE(exit_code.has_value()) << "the parse ended with " << exit_code.value_or(0);
  c->status =
      ValidateRouterFlags(*c->flags, ConfigSources::Fixed(std::move(env), kRandomWord, kUnixMs));
  return c;
}

std::string ErrorOf(std::vector<std::string> args, Env env = {}) {
  auto c = Configure(std::move(args), std::move(env));
  return c->status.ok() ? std::string("(ok)") : std::string(c->status.message());
}

TEST(RouterConfigTest, DefaultsNeedNoEnvironment) {
  auto c = Configure({});
  ASSERT_TRUE(c->status.ok()) << c->status;
  const RouterOptions& o = c->flags->options;
  EXPECT_EQ(o.server.host, "0.0.0.0");
  EXPECT_EQ(o.server.port, 8000);
  EXPECT_TRUE(o.kv_events);
  EXPECT_FALSE(o.kv_events_nats);
  EXPECT_EQ(o.nats_server, "nats://127.0.0.1:4222");
  EXPECT_TRUE(o.admin_token.empty());
  EXPECT_FALSE(o.random_seed.has_value());
  EXPECT_FALSE(o.replica_sync.has_value());
  EXPECT_EQ(o.demand.mode, core::DemandMode::kOff);
}

TEST(RouterConfigTest, EnvironmentFillsWhatTheFlagsLeaveOut) {
  const Env env = {{"NATS_SERVER", "nats://env:4222"},
                   {"INFERA_ADMIN_TOKEN", "token-from-the-environment-0123"},
                   {"INFERA_DECODE_INPUT_DEMAND", "shadow"}};
  auto c = Configure({"--host", "127.0.0.1"}, env);
  ASSERT_TRUE(c->status.ok()) << c->status;
  EXPECT_EQ(c->flags->options.nats_server, "nats://env:4222");
  EXPECT_EQ(c->flags->options.admin_token, "token-from-the-environment-0123");
  EXPECT_EQ(c->flags->options.demand.mode, core::DemandMode::kShadow);

  auto flagged = Configure({"--nats-server", "nats://flag:4222", "--decode-input-demand", "on",
                            "--admin-token", "token-from-the-command-line-0123"},
                           env);
  ASSERT_TRUE(flagged->status.ok()) << flagged->status;
  EXPECT_EQ(flagged->flags->options.nats_server, "nats://flag:4222");
  EXPECT_EQ(flagged->flags->options.admin_token, "token-from-the-command-line-0123");
  EXPECT_EQ(flagged->flags->options.demand.mode, core::DemandMode::kOn);

  // An empty variable is no value.
  auto empty = Configure({}, {{"NATS_SERVER", ""}});
  ASSERT_TRUE(empty->status.ok()) << empty->status;
  EXPECT_EQ(empty->flags->options.nats_server, "nats://127.0.0.1:4222");
}

// --config shares the flag table: command line > file > environment > default.
TEST(RouterConfigTest, ConfigFileSitsBetweenCommandLineAndEnvironment) {
  const std::string path = testing::TempDir() + "/router_config_test.toml";
  {
    std::ofstream file(path);
    file << "port = 9000\nrouter-policy = \"round-robin\"\nnats-server = \"nats://file:4222\"\n";
  }
  const Env env = {{"NATS_SERVER", "nats://env:4222"}};
  auto c = Configure({"--config", path, "--router-policy", "least-load"}, env);
  ASSERT_TRUE(c->status.ok()) << c->status;
  EXPECT_EQ(c->flags->options.server.port, 9000);
  EXPECT_EQ(c->flags->options.policy.policy, core::Policy::kLeastLoad);
  EXPECT_EQ(c->flags->options.nats_server, "nats://file:4222");
  std::remove(path.c_str());
}

TEST(RouterConfigTest, NatsRequestTimeoutsReadTheSources) {
  auto c = Configure({"--request-transport", "nats"}, {{"INFERA_NATS_REQ_IDLE_TIMEOUT", "5"},
                                                       {"INFERA_NATS_REQ_MAX_DURATION", "60"}});
  ASSERT_TRUE(c->status.ok()) << c->status;
  ASSERT_TRUE(c->flags->options.nats_requests.has_value());
  EXPECT_EQ(c->flags->options.nats_requests->idle_timeout_ms, 5000);
  EXPECT_EQ(c->flags->options.nats_requests->max_duration_ms, 60000);

  auto flagged = Configure({"--request-transport", "nats", "--nats-req-idle-timeout", "7"},
                           {{"INFERA_NATS_REQ_IDLE_TIMEOUT", "5"}});
  ASSERT_TRUE(flagged->status.ok()) << flagged->status;
  EXPECT_EQ(flagged->flags->options.nats_requests->idle_timeout_ms, 7000);
  EXPECT_EQ(flagged->flags->options.nats_requests->max_duration_ms, 0);
}

TEST(RouterConfigTest, ReplicaIdentityComesFromTheSources) {
  auto c = Configure({"--router-replica-sync"});
  ASSERT_TRUE(c->status.ok()) << c->status;
  ASSERT_TRUE(c->flags->options.replica_sync.has_value());
  const ReplicaSyncOptions& replica = *c->flags->options.replica_sync;
  EXPECT_EQ(replica.replica_id, DefaultReplicaId(kRandomWord));
  EXPECT_TRUE(replica.replica_id.ends_with(":0000002a")) << replica.replica_id;
  EXPECT_EQ(replica.epoch, static_cast<uint64_t>(kUnixMs));

  auto named = Configure({"--router-replica-sync", "--router-replica-id", "r1"});
  ASSERT_TRUE(named->status.ok()) << named->status;
  EXPECT_EQ(named->flags->options.replica_sync->replica_id, "r1");
}

TEST(RouterConfigTest, RandomTenantKeyIsDrawnFromTheSources) {
  auto c = Configure({"--tenant-cache-salt", "header:Authorization"});
  ASSERT_TRUE(c->status.ok()) << c->status;
  EXPECT_EQ(c->flags->options.tenant_salt_header, "Authorization");
  const std::string expected = RandomTenantSaltKey(ConfigSources::Fixed({}, kRandomWord, kUnixMs));
  EXPECT_EQ(expected.size(), 32u);
  EXPECT_EQ(c->flags->options.tenant_salt_key, expected);
}

TEST(RouterConfigTest, EachStepNamesWhatIsWrong) {
  EXPECT_EQ(ErrorOf({"--port", "70000"}), "--port out of range");
  EXPECT_EQ(ErrorOf({"--kv-event-transport", "kafka"}),
            "--kv-event-transport must be zmq, nats or none");
  EXPECT_EQ(ErrorOf({"--request-transport", "grpc"}),
            "--request-transport must be http or nats, got 'grpc'");
  EXPECT_EQ(ErrorOf({"--session-affinity-ttl-s", "0"}),
            "--session-affinity-ttl-s must be > 0 and at most 1e9");
  EXPECT_EQ(ErrorOf({"--approx-max-blocks", "0"}), "--approx-max-blocks must be >= 1");
  EXPECT_EQ(ErrorOf({"--kv-ingest-threads", "0"}), "--kv-ingest-threads must be 1 to 64");
  EXPECT_EQ(ErrorOf({"--kv-ingest-threads", "2", "--kv-event-transport", "nats"}),
            "--kv-ingest-threads > 1 needs --kv-event-transport zmq");
  EXPECT_EQ(ErrorOf({"--kv-ingest-threads", "2", "--kv-snapshot-path", "/s"}),
            "--kv-ingest-threads > 1 does not work with --kv-snapshot-path yet: one snapshot "
            "across ingestion shards is not built; use 1 thread or no snapshots");
  EXPECT_EQ(ErrorOf({"--tenant-cache-salt-key-file", "/k"}),
            "--tenant-cache-salt-key-file needs --tenant-cache-salt");
  EXPECT_EQ(ErrorOf({"--protect-metrics"}),
            "--protect-metrics needs an admin token (--admin-token, --admin-token-file or "
            "INFERA_ADMIN_TOKEN)");
  EXPECT_EQ(ErrorOf({"--admin-token", "t0123456789abcdef", "--admin-token-file", "/t"}),
            "give only one of --admin-token and --admin-token-file");
  EXPECT_EQ(ErrorOf({}, {{"INFERA_ROUTER_BACKEND", "go"}}),
            "--router-backend (or INFERA_ROUTER_BACKEND) must be python or rust, got 'go'");
  EXPECT_EQ(ErrorOf({}, {{"INFERA_NATS_REQ_MAX_PENDING", "5"}}),
            "--nats-req-max-pending (INFERA_NATS_REQ_MAX_PENDING): Infera's JetStream "
            "admission throttle is not supported by this router; only 0 (off, core NATS) is");
  EXPECT_EQ(ErrorOf({}, {{"INFERA_NATS_REQ_MAX_PENDING", "0"}}), "(ok)");
  EXPECT_TRUE(ErrorOf({"--router-policy", "fastest"}).starts_with("--router-policy: "));
}

TEST(RouterConfigTest, AdmissionQueueFlags) {
  // The default, auto: on for kv-aware (the default policy), its mixed pools only.
  auto def = Configure({});
  ASSERT_TRUE(def->status.ok()) << def->status;
  const AdmissionOptions& d = def->flags->options.admission;
  EXPECT_TRUE(d.enabled);
  EXPECT_FALSE(d.pd_pools);
  EXPECT_EQ(d.threshold_blocks, 1024);
  EXPECT_EQ(d.join_blocks, 300);
  EXPECT_EQ(d.queue.max_queued, 1024u);
  EXPECT_EQ(d.queue.max_wait_ns, 30'000'000'000);
  // auto with a policy the queue was not measured with: off.
  for (const char* policy : {"least-load", "round-robin", "dynamo"}) {
    auto other = Configure({"--router-policy", policy});
    ASSERT_TRUE(other->status.ok()) << other->status;
    EXPECT_FALSE(other->flags->options.admission.enabled) << policy;
  }
  auto off = Configure({"--admission-queue", "off"});
  ASSERT_TRUE(off->status.ok()) << off->status;
  EXPECT_FALSE(off->flags->options.admission.enabled);

  auto on = Configure({"--admission-queue", "on", "--router-policy", "least-load",
                       "--queue-threshold-blocks", "64", "--queue-max", "8", "--queue-max-wait-s",
                       "2.5", "--queue-join-blocks", "0"});
  ASSERT_TRUE(on->status.ok()) << on->status;
  const AdmissionOptions& o = on->flags->options.admission;
  EXPECT_TRUE(o.enabled);
  EXPECT_TRUE(o.pd_pools);
  EXPECT_EQ(o.threshold_blocks, 64);
  EXPECT_EQ(o.join_blocks, 0);
  EXPECT_EQ(o.queue.max_queued, 8u);
  EXPECT_EQ(o.queue.max_wait_ns, 2'500'000'000);

  // A policy without a load term: a start-up error naming the flag.
  const std::string rr = ErrorOf({"--admission-queue", "on", "--router-policy", "round-robin"});
  EXPECT_NE(rr.find("--admission-queue"), std::string::npos) << rr;
  EXPECT_NE(rr.find("round-robin"), std::string::npos) << rr;
  EXPECT_EQ(ErrorOf({"--router-policy", "round-robin"}), "(ok)");  // auto: any policy
  EXPECT_NE(ErrorOf({"--admission-queue", "yes"}).find("auto, on or off"), std::string::npos);
  EXPECT_NE(ErrorOf({"--queue-join-blocks", "-1"}).find("--queue-join-blocks"), std::string::npos);
  EXPECT_NE(ErrorOf({"--queue-max", "0"}).find("--queue-max"), std::string::npos);
  EXPECT_NE(ErrorOf({"--queue-max-wait-s", "-1"}).find("--queue-max-wait-s"), std::string::npos);
  EXPECT_NE(ErrorOf({"--queue-threshold-blocks", "nan"}).find("--queue-threshold-blocks"),
            std::string::npos);
}

}  // namespace
}  // namespace infera::router::config

namespace infera::router::config {
namespace {

TEST(RouterConfigTest, KvSnapshotFlags) {
  auto off = Configure({});
  ASSERT_TRUE(off->status.ok()) << off->status;
  const events::KvSnapshotOptions& d = off->flags->options.kv_snapshot;
  EXPECT_FALSE(d.enabled());
  EXPECT_EQ(d.interval_s, 30);
  EXPECT_EQ(d.max_age_s, 900);
  EXPECT_TRUE(d.fleet_derived);
  EXPECT_EQ(d.fleet_id.size(), 16u);

  // The derived id names the fleet: same workers in another order, same id.
  auto a = Configure({"--worker", "http://a:1", "--worker", "http://b:1"});
  auto b = Configure({"--worker", "http://b:1", "--worker", "http://a:1"});
  auto other = Configure({"--worker", "http://a:1"});
  EXPECT_EQ(a->flags->options.kv_snapshot.fleet_id, b->flags->options.kv_snapshot.fleet_id);
  EXPECT_NE(a->flags->options.kv_snapshot.fleet_id, other->flags->options.kv_snapshot.fleet_id);

  auto set = Configure({"--kv-snapshot-path", "/tmp/kv.snap", "--kv-snapshot-interval-s", "0",
                        "--kv-snapshot-fleet", "prod-a", "--kv-snapshot-max-age-s", "60"});
  ASSERT_TRUE(set->status.ok()) << set->status;
  const events::KvSnapshotOptions& o = set->flags->options.kv_snapshot;
  EXPECT_TRUE(o.enabled());
  EXPECT_EQ(o.interval_s, 0);
  EXPECT_EQ(o.fleet_id, "prod-a");
  EXPECT_FALSE(o.fleet_derived);
  EXPECT_EQ(o.max_age_s, 60);

  EXPECT_EQ(ErrorOf({"--kv-snapshot-interval-s", "-1"}), "--kv-snapshot-interval-s must be >= 0");
  EXPECT_EQ(ErrorOf({"--kv-snapshot-max-age-s", "0"}), "--kv-snapshot-max-age-s must be > 0");
  EXPECT_EQ(ErrorOf({"--kv-snapshot-fleet", ""}), "--kv-snapshot-fleet must be 1 to 255 bytes");
}

TEST(RouterConfigTest, KvSnapshotPeerJoinNeedsAPathAndReplicaSync) {
  EXPECT_FALSE(Configure({})->flags->options.kv_snapshot.peer_join);
  auto join = Configure(
      {"--kv-snapshot-path", "/tmp/kv.snap", "--router-replica-sync", "--kv-snapshot-peer-join"});
  ASSERT_TRUE(join->status.ok()) << join->status;
  EXPECT_TRUE(join->flags->options.kv_snapshot.peer_join);
  const std::string needs =
      "--kv-snapshot-peer-join needs --kv-snapshot-path and --router-replica-sync";
  EXPECT_EQ(ErrorOf({"--kv-snapshot-path", "/tmp/kv.snap", "--kv-snapshot-peer-join"}), needs);
  EXPECT_EQ(ErrorOf({"--router-replica-sync", "--kv-snapshot-peer-join"}), needs);
}

}  // namespace
}  // namespace infera::router::config
