#include "discovery/static_discovery.h"

#include <charconv>
#include <fstream>
#include <set>

#include "absl/status/status.h"
#include "discovery/internal/str_cat.h"
#include "nlohmann/json.hpp"

namespace infera::discovery {
namespace {

using internal::Cat;
using internal::MessageOf;
using nlohmann::json;

constexpr std::string_view kStringKeys[] = {
    "worker_id",          "model_name",         "engine",           "disagg_mode",
    "kv_events_endpoint", "kv_replay_endpoint", "request_transport"};
constexpr std::string_view kIntKeys[] = {"kv_block_size", "dp_rank", "dp_size", "num_gpu_blocks"};

bool IsOneOf(std::string_view key, auto& keys) {
  for (std::string_view k : keys) {
    if (k == key) return true;
  }
  return false;
}

absl::Status CheckUniqueIds(const std::vector<WorkerRecord>& records) {
  std::set<std::string> seen;
  for (const WorkerRecord& r : records) {
    if (!seen.insert(r.worker_id).second) {
      return absl::InvalidArgumentError(Cat("duplicate worker_id '", r.worker_id, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerRecord> ParseWorkerFlag(std::string_view flag) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t comma = flag.find(',', start);
    parts.push_back(flag.substr(start, comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  auto error = [&](std::string_view what) {
    return absl::InvalidArgumentError(Cat("--worker '", flag, "': ", what));
  };
  if (parts.empty() || parts[0].empty()) return error("expected URL,key=value,...");
  json obj = json::object();
  obj["url"] = std::string(parts[0]);
  json meta = {{"protocol", ""}, {"params", json::object()}};
  std::set<std::string_view> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    std::string_view part = parts[i];
    size_t eq = part.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return error(Cat("expected key=value, got '", part, "'"));
    }
    std::string_view key = part.substr(0, eq);
    std::string_view value = part.substr(eq + 1);
    if (key == "model") key = "model_name";  // the short spelling --help has always shown
    if (!seen.insert(key).second) return error(Cat("key '", key, "' given twice"));
    if (IsOneOf(key, kStringKeys)) {
      obj[std::string(key)] = std::string(value);
    } else if (key == "disagg_protocol") {
      meta["protocol"] = std::string(value);
    } else if (key == "bootstrap_host" || key == "bootstrap_addr" || key == "engine_id") {
      meta["params"][std::string(key)] = std::string(value);
    } else if (key == "bootstrap_port") {
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
        return error(Cat("'bootstrap_port' must be a port number, got '", value, "'"));
      }
      meta["params"]["bootstrap_port"] = v;
    } else if (key == "lora_adapters") {
      // Names separated by ';' (',' separates the flag's keys).
      json names = json::array();
      for (size_t start = 0;;) {
        const size_t semi = value.find(';', start);
        names.push_back(std::string(value.substr(start, semi - start)));
        if (semi == std::string_view::npos) break;
        start = semi + 1;
      }
      obj["lora_adapters"] = std::move(names);
    } else if (IsOneOf(key, kIntKeys)) {
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
        return error(Cat("'", key, "' must be a non-negative integer, got '", value, "'"));
      }
      obj[std::string(key)] = v;
    } else {
      return error(Cat("unknown key '", key, "'"));
    }
  }
  obj["disagg_meta"] = meta;
  auto record = WorkerRecordFromJson(obj);
  if (!record.ok()) return error(MessageOf(record.status()));
  return record;
}

std::string WorkerFlagHelp() {
  std::string keys = "model_name (or model)";
  for (std::string_view k : kStringKeys) {
    if (k != "model_name") keys += Cat(", ", k);
  }
  keys += ", disagg_protocol";
  for (std::string_view k : kIntKeys) keys += Cat(", ", k);
  keys += ", bootstrap_host, bootstrap_port, bootstrap_addr, engine_id";
  return Cat(
      "Static worker: URL[,key=value,...] (repeatable), e.g. "
      "http://10.0.0.5:30000,model_name=Qwen/Qwen3-0.6B,kv_events_endpoint=tcp://"
      "10.0.0.5:5557; keys: ",
      keys);
}

absl::StatusOr<std::vector<WorkerRecord>> ParseWorkersList(std::string_view json_text) {
  json parsed = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return absl::InvalidArgumentError("workers list is not valid JSON");
  if (!parsed.is_array()) {
    return absl::InvalidArgumentError("workers list must be a JSON array of worker records");
  }
  std::vector<WorkerRecord> records;
  records.reserve(parsed.size());
  for (size_t i = 0; i < parsed.size(); ++i) {
    auto record = WorkerRecordFromJson(parsed[i]);
    if (!record.ok()) {
      return absl::InvalidArgumentError(
          Cat("workers list [", i, "]: ", MessageOf(record.status())));
    }
    records.push_back(*std::move(record));
  }
  if (auto s = CheckUniqueIds(records); !s.ok()) {
    return absl::InvalidArgumentError(Cat("workers list: ", s.message()));
  }
  return records;
}

absl::StatusOr<std::vector<WorkerRecord>> LoadWorkersFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat("cannot open workers file '", path, "'"));
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxWorkersFileBytes) {
      return absl::InvalidArgumentError(
          Cat("workers file '", path, "' is over ", kMaxWorkersFileBytes, " bytes"));
    }
  }
  if (in.bad()) return absl::UnavailableError(Cat("error reading '", path, "'"));
  auto records = ParseWorkersList(text);
  if (!records.ok()) {
    return absl::InvalidArgumentError(Cat(path, ": ", MessageOf(records.status())));
  }
  return records;
}

StaticDiscovery::StaticDiscovery(std::vector<WorkerRecord> records)
    : records_(std::move(records)) {}

absl::Status StaticDiscovery::Start(DiscoveryCallbacks callbacks) {
  if (auto s = CheckUniqueIds(records_); !s.ok()) return s;
  for (const WorkerRecord& r : records_) {
    if (callbacks.on_added) callbacks.on_added(r);
  }
  return absl::OkStatus();
}

}  // namespace infera::discovery
