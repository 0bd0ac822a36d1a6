// DisaggMeta: a worker's prefill/decode disaggregation protocol and its parameters
// (architecture §9 and §11, doc/discovery.md "disagg_meta").
//
// In a worker record: "disagg_meta": {"protocol": P, "params": {...}}.
//
//   protocol           params (of a prefill worker)              defaults
//   ""                 —                                         (mixed workers only)
//   sglang-bootstrap   bootstrap_host: string, bootstrap_port    host of the url, 8998
//   vllm-nixl          none
//   vllm-mooncake      bootstrap_addr: "host:port", engine_id    host of the url + ":8998",
//   required
//
// A prefill or decode worker must name a protocol. Parameters of a decode or mixed
// worker are checked for their types when present but not defaulted. Unknown keys
// inside params are kept (forward compatibility).
//
// Thread-safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace infera::discovery {

enum class DisaggMode : uint8_t { kMixed = 0, kPrefill = 1, kDecode = 2 };

enum class PdProtocol : uint8_t { kNone = 0, kSglangBootstrap, kVllmNixl, kVllmMooncake };

// The protocols come from one table (disagg_meta.cc, kPdProtocols); kNone has no entry.
// "", "sglang-bootstrap", "vllm-nixl", "vllm-mooncake".
std::string_view PdProtocolName(PdProtocol protocol);
// InvalidArgument naming every protocol for anything else ("" is kNone).
absl::StatusOr<PdProtocol> ParsePdProtocol(std::string_view name);
// Every protocol's name, in the table's order (kNone's "" left out).
std::vector<std::string> PdProtocolNames();
// Them joined: JoinPdProtocolNames(", ", " or ") is "sglang-bootstrap, vllm-nixl or
// vllm-mooncake".
std::string JoinPdProtocolNames(std::string_view separator, std::string_view last_separator);

// SGLang's --disaggregation-bootstrap-port default (server_args.py) and vLLM's
// VLLM_MOONCAKE_BOOTSTRAP_PORT default (mooncake_connector_proxy.py: `bootstrap_port or 8998`).
inline constexpr uint32_t kDefaultBootstrapPort = 8998;

// The typed parameters, as parsed (defaults applied for prefill workers).
struct PdParams {
  std::string bootstrap_host;   // sglang-bootstrap
  uint32_t bootstrap_port = 0;  // sglang-bootstrap; 0 = not given (decode/mixed)
  std::string bootstrap_addr;   // vllm-mooncake "host:port"
  std::string engine_id;        // vllm-mooncake

  friend bool operator==(const PdParams&, const PdParams&) = default;
};

// Checks `params` (a JSON object, modified in place: defaults are written into it so
// the record's params are canonical) for `protocol` and `mode`; `url_host` is the
// host of the worker's url. Errors are InvalidArgument naming the field
// ("disagg_meta.params.bootstrap_port ...").
absl::StatusOr<PdParams> ParsePdParams(PdProtocol protocol, DisaggMode mode,
                                       std::string_view url_host, nlohmann::json& params);

// "host" of "host:port" (IPv6 "[::1]:80" → "[::1]"); the whole text when there is no colon.
std::string_view HostOfHostPort(std::string_view host_port);

}  // namespace infera::discovery
