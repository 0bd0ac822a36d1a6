// WorkerRecord: what a worker publishes about itself (architecture §11, doc/discovery.md).
//
// The same JSON record appears as an etcd value under `<prefix><worker_id>` (worker_id
// is "host:port" of the url unless given), in a
// `--workers-file` list, in a Kubernetes Pod annotation, and is built from a
// `--worker URL,key=value,...` flag:
//
//   {"worker_id": "10.0.0.5:30000", "url": "http://10.0.0.5:30000",
//    "model_name": "Qwen/Qwen3-0.6B", "engine": "vllm",
//    "disagg_mode": "mixed", "disagg_meta": {"protocol": "", "params": {}},
//    "kv_events_endpoint": "tcp://10.0.0.5:5557",
//    "kv_replay_endpoint": "tcp://10.0.0.5:5558",
//    "kv_block_size": 16, "dp_rank": 0, "dp_size": 1, "num_gpu_blocks": 8192,
//    "lora_adapters": ["sql-lora"]}
//
// The struct is plain data so the router and the simulator can share it. The JSON
// functions below parse untrusted text into StatusOr (InvalidArgument naming the
// offending field; unknown fields are ignored) and never throw.
//
// Thread-safety: plain data and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "discovery/disagg_meta.h"
#include "nlohmann/json_fwd.hpp"

namespace infera::discovery {

struct WorkerRecord {
  std::string worker_id;  // "host:port", unique key
  std::string url;        // base URL for HTTP requests, "http://host:port"
  std::string model_name;
  std::string engine = "vllm";  // sglang | vllm | atom | mock
  DisaggMode disagg_mode = DisaggMode::kMixed;
  std::string disagg_protocol;            // sglang-bootstrap | vllm-nixl | vllm-mooncake | ""
  std::string disagg_params_json = "{}";  // protocol parameters, JSON object (defaults applied)
  PdProtocol pd_protocol = PdProtocol::kNone;  // disagg_protocol, parsed
  PdParams pd;                                 // disagg_params_json, typed (disagg_meta.h)
  std::string kv_events_endpoint;              // "tcp://host:5557" for rank 0; rank r uses port + r
  std::string kv_replay_endpoint;              // optional ROUTER socket for gap replay
  uint32_t kv_block_size = 16;
  uint32_t dp_rank = 0;  // first rank this record describes
  uint32_t dp_size = 1;  // ranks dp_rank .. dp_rank + dp_size - 1
  // KV capacity of each rank in blocks of kv_block_size (vLLM's
  // cache_config.num_gpu_blocks; Dynamo publishes it as total_kv_blocks); 0: unknown.
  // Bounds the router's view of each rank (doc/index.md "Bounded views").
  uint32_t num_gpu_blocks = 0;
  // LoRA adapters the worker serves beside model_name (vLLM's --lora-modules names):
  // a request whose model is one of them is routed to workers listing it, and its
  // blocks hash with the adapter (doc/hashing.md "Extra keys"). Not in Infera's
  // record; absent: none.
  std::vector<std::string> lora_adapters{};
  // How the router reaches the worker (Infera's field): "http" (POST to url) or "nats"
  // (publish to infera.req.<base64url(worker_id)>; doc/nats-request-transport.md).
  std::string request_transport = "http";

  friend bool operator==(const WorkerRecord&, const WorkerRecord&) = default;
};

// Bounds applied when parsing; a record outside them is rejected.
inline constexpr uint32_t kMaxKvBlockSize = 1u << 16;
inline constexpr uint32_t kMaxDpRanks = 1u << 12;  // dp_rank + dp_size <= this
inline constexpr uint32_t kMaxNumGpuBlocks = 1u << 31;
inline constexpr size_t kMaxRecordBytes = 64 * 1024;
inline constexpr size_t kMaxLoraAdapters = 1024;
// worker_id: 1 to this many visible ASCII characters (0x21-0x7e) other than '/'.
inline constexpr size_t kMaxWorkerIdBytes = 256;

// "mixed" | "prefill" | "decode".
std::string_view DisaggModeName(DisaggMode mode);
absl::StatusOr<DisaggMode> ParseDisaggMode(std::string_view name);

// Parses one record from JSON text (at most kMaxRecordBytes). worker_id defaults
// to the url's "host:port" when absent; url is required.
absl::StatusOr<WorkerRecord> ParseWorkerRecord(std::string_view json_text);
// Same, from an already parsed JSON value (must be an object).
absl::StatusOr<WorkerRecord> WorkerRecordFromJson(const nlohmann::json& value);

// The canonical JSON of a record; ParseWorkerRecord(SerializeWorkerRecord(r)) == r
// for every valid r. kv_replay_endpoint is omitted when empty, num_gpu_blocks when 0,
// lora_adapters when empty, request_transport when "http".
nlohmann::json WorkerRecordToJson(const WorkerRecord& record);
std::string SerializeWorkerRecord(const WorkerRecord& record);

// "host:port" of an "http://host:port[/...]" URL; InvalidArgument otherwise (also
// for user info, "http://user:pw@host:port": a record never carries credentials).
absl::StatusOr<std::string> HostPortOfUrl(std::string_view url);

}  // namespace infera::discovery
