#include "discovery/disagg_meta.h"

#include <iterator>

#include "absl/status/status.h"
#include "discovery/internal/str_cat.h"
#include "discovery/worker_record.h"
#include "nlohmann/json.hpp"

namespace infera::discovery {
namespace {

using internal::Cat;
using nlohmann::json;

absl::Status ParamError(std::string_view key, std::string_view what) {
  return absl::InvalidArgumentError(
      Cat("worker record: field 'disagg_meta.params.", key, "' ", what));
}

bool HasSpace(std::string_view s) { return s.find_first_of(" \t\r\n") != std::string_view::npos; }

// A non-empty string without whitespace; absent or null leaves *out unchanged.
absl::Status ReadToken(const json& params, std::string_view key, std::string* out) {
  auto it = params.find(key);
  if (it == params.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return ParamError(key, "must be a string");
  std::string value = it->get<std::string>();
  if (value.empty() || HasSpace(value)) {
    return ParamError(key, "must be non-empty and contain no whitespace");
  }
  *out = std::move(value);
  return absl::OkStatus();
}

absl::Status ReadPort(const json& params, std::string_view key, uint32_t* out) {
  auto it = params.find(key);
  if (it == params.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 65535) {
    return ParamError(key, "must be an integer port 1..65535");
  }
  *out = static_cast<uint32_t>(it->get<int64_t>());
  return absl::OkStatus();
}

// "host:port" with a port 1..65535 (the rule of a worker url's host:port).
absl::Status CheckHostPort(std::string_view key, std::string_view addr) {
  auto host_port = HostPortOfUrl(Cat("http://", addr));
  if (!host_port.ok() || *host_port != addr) {
    return ParamError(key, Cat("must be \"host:port\" with a port 1..65535, got '", addr, "'"));
  }
  return absl::OkStatus();
}

// vllm-nixl: the prefill leg's response carries everything the decode leg needs.
absl::Status NoParams(bool, std::string_view, json&, PdParams&) { return absl::OkStatus(); }

absl::Status SglangBootstrapParams(bool prefill, std::string_view url_host, json& params,
                                   PdParams& out) {
  if (auto s = ReadToken(params, "bootstrap_host", &out.bootstrap_host); !s.ok()) return s;
  if (auto s = ReadPort(params, "bootstrap_port", &out.bootstrap_port); !s.ok()) return s;
  if (prefill) {
    if (out.bootstrap_host.empty()) out.bootstrap_host = std::string(url_host);
    if (out.bootstrap_port == 0) out.bootstrap_port = kDefaultBootstrapPort;
    params["bootstrap_host"] = out.bootstrap_host;
    params["bootstrap_port"] = out.bootstrap_port;
  }
  return absl::OkStatus();
}

absl::Status VllmMooncakeParams(bool prefill, std::string_view url_host, json& params,
                                PdParams& out) {
  if (auto s = ReadToken(params, "bootstrap_addr", &out.bootstrap_addr); !s.ok()) return s;
  if (!out.bootstrap_addr.empty()) {
    if (auto s = CheckHostPort("bootstrap_addr", out.bootstrap_addr); !s.ok()) return s;
  }
  if (auto s = ReadToken(params, "engine_id", &out.engine_id); !s.ok()) return s;
  if (prefill) {
    if (out.engine_id.empty()) {
      return ParamError("engine_id",
                        "is required for a vllm-mooncake prefill worker (its "
                        "kv_transfer_config.engine_id)");
    }
    if (out.bootstrap_addr.empty()) out.bootstrap_addr = Cat(url_host, ":", kDefaultBootstrapPort);
    params["bootstrap_addr"] = out.bootstrap_addr;
    params["engine_id"] = out.engine_id;
  }
  return absl::OkStatus();
}

struct PdProtocolEntry {
  PdProtocol protocol;
  std::string_view name;
  // Checks (and for a prefill worker defaults, written back) the protocol's params.
  absl::Status (*parse_params)(bool prefill, std::string_view url_host, json& params,
                               PdParams& out);
};

// The PD protocols a worker record can name, in the order messages and --help list
// them. A new protocol: its enum value, its params function above and one line here;
// the router's side is one file and one line in src/router/dispatch/pd/protocols.cc.
constexpr PdProtocolEntry kPdProtocols[] = {
    {PdProtocol::kSglangBootstrap, "sglang-bootstrap", SglangBootstrapParams},
    {PdProtocol::kVllmNixl, "vllm-nixl", NoParams},
    {PdProtocol::kVllmMooncake, "vllm-mooncake", VllmMooncakeParams},
};

const PdProtocolEntry* FindPdProtocol(PdProtocol protocol) {
  for (const PdProtocolEntry& entry : kPdProtocols) {
    if (entry.protocol == protocol) return &entry;
  }
  return nullptr;
}

}  // namespace

std::string_view PdProtocolName(PdProtocol protocol) {
  const PdProtocolEntry* entry = FindPdProtocol(protocol);
  return entry == nullptr ? std::string_view() : entry->name;
}

std::vector<std::string> PdProtocolNames() {
  std::vector<std::string> names;
  for (const PdProtocolEntry& entry : kPdProtocols) names.emplace_back(entry.name);
  return names;
}

std::string JoinPdProtocolNames(std::string_view separator, std::string_view last_separator) {
  std::string out;
  const size_t count = std::size(kPdProtocols);
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out += i + 1 == count ? last_separator : separator;
    out += kPdProtocols[i].name;
  }
  return out;
}

absl::StatusOr<PdProtocol> ParsePdProtocol(std::string_view name) {
  if (name.empty()) return PdProtocol::kNone;
  for (const PdProtocolEntry& entry : kPdProtocols) {
    if (name == entry.name) return entry.protocol;
  }
  return absl::InvalidArgumentError(
      Cat("must be ", JoinPdProtocolNames(", ", " or "), ", got '", name, "'"));
}

std::string_view HostOfHostPort(std::string_view host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos) return host_port;
  return host_port.substr(0, colon);
}

absl::StatusOr<PdParams> ParsePdParams(PdProtocol protocol, DisaggMode mode,
                                       std::string_view url_host, json& params) {
  PdParams out;
  const PdProtocolEntry* entry = FindPdProtocol(protocol);
  if (entry == nullptr) {
    if (mode != DisaggMode::kMixed) {
      return absl::InvalidArgumentError(
          Cat("worker record: field 'disagg_meta.protocol' is required for a ",
              mode == DisaggMode::kPrefill ? "prefill" : "decode", " worker (",
              JoinPdProtocolNames(", ", " or "), ")"));
    }
    return out;
  }
  if (absl::Status s = entry->parse_params(mode == DisaggMode::kPrefill, url_host, params, out);
      !s.ok()) {
    return s;
  }
  return out;
}

}  // namespace infera::discovery
