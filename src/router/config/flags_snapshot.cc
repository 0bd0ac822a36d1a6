// The KV-view snapshot flags (doc/snapshot.md §2) and their validation step.
#include <xxhash.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "router/config/router_flags.h"
#include "router/config/validate.h"
#include "spdlog/spdlog.h"

namespace infera::router::config {
namespace {

// §4.2: transport \n discovery backend \n source \n kv topic (the model is in the
// static workers' specs; etcd and Kubernetes fleets are named by their source).
std::string DerivedFleetId(const RouterFlags& f) {
  const discovery::DiscoveryConfig& d = f.discovery;
  std::string source;
  if (d.backend == "etcd") {
    source = d.etcd_endpoint + " " + d.etcd_prefix;
  } else if (d.backend == "kubernetes" || d.backend == "k8s") {
    source = d.k8s_namespace + " " + d.k8s_label_selector;
  } else {
    std::vector<std::string> workers = d.worker_flags;
    std::sort(workers.begin(), workers.end());
    source = absl::StrJoin(workers, " ") + (d.workers_file.empty() ? "" : " " + d.workers_file);
  }
  const std::string canonical =
      absl::StrJoin({f.kv_transport, d.backend, source, f.options.kv_events_topic}, "\n");
  return absl::StrFormat("%016x", XXH3_64bits(canonical.data(), canonical.size()));
}

}  // namespace

void AddKvSnapshotFlags(CLI::App& app, RouterFlags& f) {
  events::KvSnapshotOptions& o = f.options.kv_snapshot;
  app.add_option("--kv-snapshot-path", o.path,
                 "File of the KV-view snapshot, written periodically and at SIGTERM and loaded "
                 "at start so a restart replays only what came after it (empty: off; "
                 "doc/snapshot.md)")
      ->capture_default_str();
  app.add_option("--kv-snapshot-interval-s", o.interval_s,
                 "A periodic snapshot starts this long after the previous one ended (0: only "
                 "at SIGTERM)")
      ->capture_default_str();
  f.snapshot_fleet_flag =
      app.add_option("--kv-snapshot-fleet", o.fleet_id,
                     "Fleet identity written into the snapshot and required of a file loaded "
                     "(default: derived from the transport, discovery source and topic)");
  app.add_option("--kv-snapshot-max-age-s", o.max_age_s,
                 "A snapshot older than this at start is refused (full replay)")
      ->capture_default_str();
  app.add_flag("--kv-snapshot-peer-join", o.peer_join,
               "With no usable local snapshot, fetch a peer replica's over NATS before the "
               "start-up load (needs --kv-snapshot-path and --router-replica-sync)");
}

absl::Status ResolveKvSnapshot(RouterFlags& f, const ConfigSources&) {
  events::KvSnapshotOptions& o = f.options.kv_snapshot;
  if (o.interval_s < 0) return FlagError("--kv-snapshot-interval-s must be >= 0");
  if (o.max_age_s <= 0) return FlagError("--kv-snapshot-max-age-s must be > 0");
  o.fleet_derived = f.snapshot_fleet_flag->count() == 0;
  if (o.fleet_derived) o.fleet_id = DerivedFleetId(f);
  if (o.fleet_id.empty() || o.fleet_id.size() > 255) {
    return FlagError("--kv-snapshot-fleet must be 1 to 255 bytes");
  }
  if (o.peer_join && (!o.enabled() || !f.replica_sync)) {
    return FlagError("--kv-snapshot-peer-join needs --kv-snapshot-path and --router-replica-sync");
  }
  if (o.enabled() && f.kv_transport == "none") {
    spdlog::warn(
        "kv-snapshot: --kv-snapshot-path needs KV events (--kv-event-transport zmq or nats); "
        "with none no snapshot is written or loaded");
  } else if (o.enabled()) {
    spdlog::info("kv-snapshot: fleet {} ({})", o.fleet_id, o.fleet_derived ? "derived" : "flag");
  }
  return absl::OkStatus();
}

}  // namespace infera::router::config
