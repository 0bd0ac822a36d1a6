#include "discovery/worker_record.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "absl/status/status.h"
#include "discovery/internal/str_cat.h"
#include "nlohmann/json.hpp"

namespace infera::discovery {
namespace {

using internal::Cat;
using internal::MessageOf;
using nlohmann::json;

constexpr std::array<std::string_view, 4> kEngines = {"sglang", "vllm", "atom", "mock"};

absl::Status FieldError(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(Cat("worker record: field '", field, "' ", what));
}

// Reads an optional string field; null counts as absent.
absl::Status ReadString(const json& obj, std::string_view field, std::string* out) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return FieldError(field, "must be a string");
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// Reads an optional non-negative integer field bounded by max_value.
absl::Status ReadUint(const json& obj, std::string_view field, uint32_t max_value, uint32_t* out) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (it->is_number_unsigned()) {
    uint64_t v = it->get<uint64_t>();
    if (v > max_value) {
      return FieldError(field, Cat("must be at most ", max_value, ", got ", v));
    }
    *out = static_cast<uint32_t>(v);
    return absl::OkStatus();
  }
  if (it->is_number_integer()) return FieldError(field, "must not be negative");
  return FieldError(field, "must be a non-negative integer");
}

absl::Status CheckEndpoint(std::string_view field, const std::string& endpoint) {
  if (endpoint.empty()) return absl::OkStatus();
  if (endpoint.rfind("tcp://", 0) != 0 && endpoint.rfind("ipc://", 0) != 0) {
    return FieldError(field, Cat("must be a tcp:// or ipc:// endpoint, got '", endpoint, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view DisaggModeName(DisaggMode mode) {
  switch (mode) {
    case DisaggMode::kMixed:
      return "mixed";
    case DisaggMode::kPrefill:
      return "prefill";
    case DisaggMode::kDecode:
      return "decode";
  }
  return "mixed";
}

absl::StatusOr<DisaggMode> ParseDisaggMode(std::string_view name) {
  if (name == "mixed") return DisaggMode::kMixed;
  if (name == "prefill") return DisaggMode::kPrefill;
  if (name == "decode") return DisaggMode::kDecode;
  return absl::InvalidArgumentError(
      Cat("disagg_mode must be mixed, prefill or decode, got '", name, "'"));
}

absl::StatusOr<std::string> HostPortOfUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return absl::InvalidArgumentError(Cat("url must start with http://, got '", url, "'"));
  }
  std::string_view rest = url.substr(kScheme.size());
  std::string_view host_port = rest.substr(0, rest.find('/'));
  // Not echoed: it may hold a password.
  if (host_port.find('@') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        "url must not carry user info (credentials); a worker's url is http://host:port");
  }
  // A host is visible ASCII: a space or a control byte would end up in addresses the
  // router derives from it (a prefill worker's default bootstrap host), which reject it.
  if (std::any_of(host_port.begin(), host_port.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; })) {
    return absl::InvalidArgumentError(
        Cat("url's host:port must not contain whitespace or control characters, got '", url,
            "'"));
  }
  size_t colon = host_port.rfind(':');
  if (host_port.empty() || colon == std::string_view::npos || colon == 0 ||
      colon + 1 == host_port.size()) {
    return absl::InvalidArgumentError(Cat("url must be http://host:port, got '", url, "'"));
  }
  std::string_view port = host_port.substr(colon + 1);
  unsigned port_value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), port_value);
  if (ec != std::errc() || end != port.data() + port.size() || port_value == 0 ||
      port_value > 65535) {
    return absl::InvalidArgumentError(Cat("url has a bad port: '", url, "'"));
  }
  return std::string(host_port);
}

absl::StatusOr<WorkerRecord> WorkerRecordFromJson(const json& obj) {
  if (!obj.is_object()) {
    return absl::InvalidArgumentError("worker record must be a JSON object");
  }
  WorkerRecord r;
  if (auto s = ReadString(obj, "url", &r.url); !s.ok()) return s;
  if (r.url.empty()) return FieldError("url", "is required");
  auto host_port = HostPortOfUrl(r.url);
  if (!host_port.ok()) return FieldError("url", MessageOf(host_port.status()));
  if (auto s = ReadString(obj, "worker_id", &r.worker_id); !s.ok()) return s;
  if (r.worker_id.empty()) r.worker_id = *host_port;
  // The id is shown to clients (X-Infera-Worker-Id), in metric labels and URLs
  // (cache-view): visible ASCII only, no raw record bytes.
  if (r.worker_id.size() > kMaxWorkerIdBytes ||
      !std::all_of(r.worker_id.begin(), r.worker_id.end(),
                   [](char c) { return c > 0x20 && c < 0x7f && c != '/'; })) {
    return FieldError("worker_id", Cat("must be 1 to ", kMaxWorkerIdBytes,
                                       " visible ASCII characters other than '/'"));
  }
  if (auto s = ReadString(obj, "model_name", &r.model_name); !s.ok()) return s;
  if (auto s = ReadString(obj, "engine", &r.engine); !s.ok()) return s;
  bool known_engine = false;
  for (std::string_view e : kEngines) known_engine |= (r.engine == e);
  if (!known_engine) {
    return FieldError("engine", Cat("must be sglang, vllm, atom or mock, got '", r.engine, "'"));
  }
  std::string mode = "mixed";
  if (auto s = ReadString(obj, "disagg_mode", &mode); !s.ok()) return s;
  auto parsed_mode = ParseDisaggMode(mode);
  if (!parsed_mode.ok()) return FieldError("disagg_mode", MessageOf(parsed_mode.status()));
  r.disagg_mode = *parsed_mode;

  json params = json::object();
  if (auto it = obj.find("disagg_meta"); it != obj.end() && !it->is_null()) {
    if (!it->is_object()) return FieldError("disagg_meta", "must be an object");
    if (auto s = ReadString(*it, "protocol", &r.disagg_protocol); !s.ok()) {
      return FieldError("disagg_meta.protocol", "must be a string");
    }
    if (auto p = it->find("params"); p != it->end() && !p->is_null()) {
      if (!p->is_object()) return FieldError("disagg_meta.params", "must be an object");
      params = *p;
    }
  }
  auto protocol = ParsePdProtocol(r.disagg_protocol);
  if (!protocol.ok()) return FieldError("disagg_meta.protocol", MessageOf(protocol.status()));
  r.pd_protocol = *protocol;
  auto pd = ParsePdParams(r.pd_protocol, r.disagg_mode, HostOfHostPort(*host_port), params);
  if (!pd.ok()) return pd.status();
  r.pd = *std::move(pd);
  r.disagg_params_json = params.dump(-1, ' ', false, json::error_handler_t::replace);
  if (auto s = ReadString(obj, "kv_events_endpoint", &r.kv_events_endpoint); !s.ok()) return s;
  if (auto s = CheckEndpoint("kv_events_endpoint", r.kv_events_endpoint); !s.ok()) return s;
  if (auto s = ReadString(obj, "kv_replay_endpoint", &r.kv_replay_endpoint); !s.ok()) return s;
  if (auto s = CheckEndpoint("kv_replay_endpoint", r.kv_replay_endpoint); !s.ok()) return s;
  if (auto s = ReadUint(obj, "kv_block_size", kMaxKvBlockSize, &r.kv_block_size); !s.ok()) {
    return s;
  }
  if (r.kv_block_size == 0) return FieldError("kv_block_size", "must be positive");
  if (auto s = ReadUint(obj, "dp_rank", kMaxDpRanks - 1, &r.dp_rank); !s.ok()) return s;
  if (auto s = ReadUint(obj, "dp_size", kMaxDpRanks, &r.dp_size); !s.ok()) return s;
  if (r.dp_size == 0) return FieldError("dp_size", "must be positive");
  if (r.dp_rank + r.dp_size > kMaxDpRanks) {
    return FieldError("dp_size", Cat("dp_rank + dp_size must be at most ", kMaxDpRanks));
  }
  if (auto s = ReadUint(obj, "num_gpu_blocks", kMaxNumGpuBlocks, &r.num_gpu_blocks); !s.ok()) {
    return s;
  }
  if (auto it = obj.find("lora_adapters"); it != obj.end() && !it->is_null()) {
    if (!it->is_array()) return FieldError("lora_adapters", "must be an array of names");
    if (it->size() > kMaxLoraAdapters) {
      return FieldError("lora_adapters", Cat("must list at most ", kMaxLoraAdapters, " adapters"));
    }
    for (const json& name : *it) {
      if (!name.is_string() || name.get_ref<const std::string&>().empty()) {
        return FieldError("lora_adapters", "must be an array of non-empty strings");
      }
      r.lora_adapters.push_back(name.get<std::string>());
    }
  }
  if (auto s = ReadString(obj, "request_transport", &r.request_transport); !s.ok()) return s;
  if (r.request_transport != "http" && r.request_transport != "nats") {
    return FieldError("request_transport",
                      Cat("must be http or nats, got '", r.request_transport, "'"));
  }
  return r;
}

absl::StatusOr<WorkerRecord> ParseWorkerRecord(std::string_view json_text) {
  if (json_text.size() > kMaxRecordBytes) {
    return absl::InvalidArgumentError(
        Cat("worker record is ", json_text.size(), " bytes, over the limit of ", kMaxRecordBytes));
  }
  json parsed = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return absl::InvalidArgumentError("worker record is not valid JSON");
  return WorkerRecordFromJson(parsed);
}

json WorkerRecordToJson(const WorkerRecord& r) {
  json params = json::parse(r.disagg_params_json, nullptr, /*allow_exceptions=*/false);
  if (!params.is_object()) params = json::object();
  json out = {
      {"worker_id", r.worker_id},
      {"url", r.url},
      {"model_name", r.model_name},
      {"engine", r.engine},
      {"disagg_mode", std::string(DisaggModeName(r.disagg_mode))},
      {"disagg_meta", {{"protocol", r.disagg_protocol}, {"params", params}}},
      {"kv_events_endpoint", r.kv_events_endpoint},
      {"kv_block_size", r.kv_block_size},
      {"dp_rank", r.dp_rank},
      {"dp_size", r.dp_size},
  };
  if (!r.kv_replay_endpoint.empty()) out["kv_replay_endpoint"] = r.kv_replay_endpoint;
  if (r.num_gpu_blocks > 0) out["num_gpu_blocks"] = r.num_gpu_blocks;
  if (!r.lora_adapters.empty()) out["lora_adapters"] = r.lora_adapters;
  if (r.request_transport != "http") out["request_transport"] = r.request_transport;
  return out;
}

std::string SerializeWorkerRecord(const WorkerRecord& r) {
  return WorkerRecordToJson(r).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace infera::discovery
