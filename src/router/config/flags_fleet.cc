// Flag groups of the fleet: discovery, KV views, replicas, tenants, transport.
// Each function is one entry of kFlagGroups (flag_table.cc); README.md says how a flag
// is added.
#include "router/config/router_flags.h"

namespace infera::router::config {

// How workers are found (src/discovery/discovery_flags.h).
void AddDiscoveryGroup(CLI::App& app, RouterFlags& f) {
  discovery::AddDiscoveryFlags(app, f.discovery);
}

// Where the KV views come from: ZMQ, NATS JetStream, or the approximation.
void AddKvEventFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  app.add_option("--kv-event-transport", f.kv_transport,
                 "zmq (engines' ZMQ streams) | nats (JetStream, fed by infera-register "
                 "--kv-relay nats) | none (approximate mode, see --approx-ttl-s)")
      ->capture_default_str();
  app.add_option("--kv-ingest-threads", o.kv_ingest_threads,
                 "--kv-event-transport zmq: ingestion shards, each a thread with its own "
                 "subscriptions; a worker's ranks are spread by a hash of their key "
                 "(not with --kv-snapshot-path yet)")
      ->capture_default_str();
  app.add_option("--approx-ttl-s", f.approx_ttl_s,
                 "--kv-event-transport none, kv-aware: a routed prompt counts as cached on its "
                 "worker this long after its last pick (0: no cache term)")
      ->capture_default_str();
  app.add_option("--approx-max-blocks", o.approx.max_blocks,
                 "--kv-event-transport none: predicted cached blocks kept per worker")
      ->capture_default_str();
  f.nats_flag =
      app.add_option("--nats-server", o.nats_server,
                     "NATS server URL(s) for --kv-event-transport nats, --request-transport nats "
                     "and --router-replica-sync (without the flag: env NATS_SERVER)")
          ->capture_default_str();
}

// Router replicas sharing in-flight load (doc/replica-sync.md).
void AddReplicaFlags(CLI::App& app, RouterFlags& f) {
  app.add_flag("--router-replica-sync", f.replica_sync,
               "Share in-flight load with the other router replicas in front of the same fleet "
               "over NATS core (--nats-server), so their load terms see the fleet's load");
  app.add_option("--router-replica-id", f.replica.replica_id,
                 "This replica's id on the sync subjects (default: <hostname>:<pid>:<random>)");
  app.add_option("--router-replica-flush-ms", f.replica.flush_ms,
                 "Replica sync: at most one load delta per this many ms (a burst is one message)")
      ->capture_default_str();
  app.add_option("--router-replica-heartbeat-ms", f.replica.heartbeat_ms,
                 "Replica sync: publish a full load snapshot this often")
      ->capture_default_str();
  app.add_option("--router-replica-ttl-ms", f.replica.ttl_ms,
                 "Replica sync: a peer silent this long stops counting (its load expires)")
      ->capture_default_str();
}

// Readiness, the route receipt and the ZMQ topic of the KV views.
void AddViewFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  app.add_option("--ready-after-replay", o.ready_after_replay,
                 "/ready answers 503 \"starting\" until the KV views are first rebuilt at start "
                 "(engines' replay sockets, or the JetStream stream); /health never waits")
      ->capture_default_str();
  app.add_flag("--route-receipt", o.route_receipt,
               "Answers carry X-Infera-Route: the chosen target, role, cache_hits, "
               "request_blocks, the cost terms and the runner-up's cost (doc/router.md)");
  app.add_option("--kv-events-topic", o.kv_events_topic,
                 "ZMQ subscription topic prefix (empty: all)");
}

// Tenant isolation of the cache views, and their bound.
void AddTenantFlags(CLI::App& app, RouterFlags& f) {
  app.add_option("--tenant-cache-salt", f.tenant_salt_spec,
                 "header:NAME: each request gets its tenant's cache_salt (a keyed hash of "
                 "header NAME, e.g. Authorization), so tenants neither probe nor share each "
                 "other's prefix caches (off by default; doc/router.md \"Tenant isolation\")");
  app.add_option("--tenant-cache-salt-key-file", f.tenant_salt_key_file,
                 "Secret key of --tenant-cache-salt (at least 16 bytes; the same on every "
                 "replica); default: random per process");
  f.bound_flag =
      app.add_option("--max-index-blocks", f.max_index_blocks,
                     "Bound of each target's cache view in blocks, oldest evicted first (0: none; "
                     "default: 1.25 x the worker record's num_gpu_blocks, else 1048576)");
}

// Requests to workers over HTTP or NATS (doc/nats-request-transport.md).
void AddRequestTransportFlags(CLI::App& app, RouterFlags& f) {
  app.add_option("--request-transport", f.request_transport,
                 "http | nats: with nats, workers whose record says request_transport nats get "
                 "their requests over NATS (--nats-server; infera-register --request-transport "
                 "nats serves them), the others over HTTP")
      ->capture_default_str();
  f.nats_request_flags.Add(app, transport::NatsRequestFlags::Side::kRouter);
  f.nats_pending_flag =
      app.add_option("--nats-req-max-pending", f.nats_max_pending,
                     "Infera's JetStream admission throttle: only 0 (off) is supported (env "
                     "INFERA_NATS_REQ_MAX_PENDING)");
}

}  // namespace infera::router::config
