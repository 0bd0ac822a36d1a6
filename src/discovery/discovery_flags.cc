#include "discovery/discovery_flags.h"

namespace infera::discovery {

void AddDiscoveryFlags(CLI::App& app, DiscoveryConfig& config) {
  app.add_option("--discovery-backend", config.backend, "static | etcd")->capture_default_str();
  app.add_option("--etcd-endpoint", config.etcd_endpoint, "etcd endpoints host:port[,host:port]")
      ->capture_default_str();
  app.add_option("--etcd-prefix", config.etcd_prefix, "etcd key prefix of worker records")
      ->capture_default_str();
  app.add_option("--worker", config.worker_flags,
                 "Static worker: URL[,key=value,...] (repeatable); keys: worker_id, model_name, "
                 "engine (vllm|sglang|atom|mock), disagg_mode, disagg_protocol, "
                 "kv_events_endpoint, kv_replay_endpoint, kv_block_size, dp_rank, dp_size, "
                 "num_gpu_blocks, bootstrap_host, bootstrap_port, bootstrap_addr, engine_id");
  app.add_option("--workers-file", config.workers_file,
                 "JSON list of worker records (etcd schema)");
}

}  // namespace infera::discovery
