// StaticDiscovery: a fixed worker list from `--worker` flags or `--workers-file`.
//
//   --worker
//   http://10.0.0.5:30000,model_name=Qwen/Qwen3-0.6B,kv_events_endpoint=tcp://10.0.0.5:5557
//   --workers-file workers.json   // [ {worker record}, ... ] exactly as stored in etcd
//
// The flag is the URL followed by comma-separated key=value pairs whose keys are
// the record's field names (worker_id, model_name (also spelled model), engine, disagg_mode,
// disagg_protocol, kv_events_endpoint, kv_replay_endpoint, kv_block_size, dp_rank,
// dp_size, num_gpu_blocks, lora_adapters: names separated by ';') or disagg_meta.params
// keys (bootstrap_host, bootstrap_port, bootstrap_addr, engine_id); the values go
// through the same validation as a JSON record. Values cannot contain commas (use
// --workers-file for other disagg_meta.params).
//
// Thread-safety: the parsing functions are pure. StaticDiscovery follows discovery.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "discovery/discovery.h"
#include "discovery/worker_record.h"

namespace infera::discovery {

inline constexpr size_t kMaxWorkersFileBytes = 16 * 1024 * 1024;

// Parses one `--worker` flag value.
absl::StatusOr<WorkerRecord> ParseWorkerFlag(std::string_view flag);

// The `--worker` help text, naming every key ParseWorkerFlag accepts.
std::string WorkerFlagHelp();

// Parses a JSON list of worker records; errors name the list index. Duplicate
// worker_ids are rejected.
absl::StatusOr<std::vector<WorkerRecord>> ParseWorkersList(std::string_view json_text);

// Reads and parses a workers file (at most kMaxWorkersFileBytes).
absl::StatusOr<std::vector<WorkerRecord>> LoadWorkersFile(const std::string& path);

// Reports each record once via on_added inside Start(); nothing ever changes.
class StaticDiscovery final : public Discovery {
 public:
  explicit StaticDiscovery(std::vector<WorkerRecord> records);
  // InvalidArgument when two records share a worker_id (nothing is reported then).
  absl::Status Start(DiscoveryCallbacks callbacks) override;
  void Stop() override {}

 private:
  std::vector<WorkerRecord> records_;
};

}  // namespace infera::discovery
