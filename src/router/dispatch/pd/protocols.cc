// The PD protocols the router speaks, one registration line each (protocol.h), and
// the --pd-prefill-guard-release flag (options.h).
#include <string>

#include "router/dispatch/pd/options.h"
#include "router/dispatch/pd/protocol.h"

namespace infera::router {
namespace {

struct Registration {
  discovery::PdProtocol protocol;
  const PdProtocol& (*leaf)();
};

// A new protocol: its name and parameters in discovery's table (disagg_meta.cc,
// kPdProtocols), its file here (a PdProtocol leaf with its leg bodies) and one line below.
constexpr Registration kProtocols[] = {
    {discovery::PdProtocol::kSglangBootstrap, &SglangBootstrapProtocol},
    {discovery::PdProtocol::kVllmNixl, &VllmNixlProtocol},
    {discovery::PdProtocol::kVllmMooncake, &VllmMooncakeProtocol},
};

}  // namespace

const PdProtocol& PdProtocolFor(discovery::PdProtocol protocol) {
  for (const Registration& r : kProtocols) {
    if (r.protocol == protocol) return r.leaf();
  }
  return SglangBootstrapProtocol();  // kNone: not a pair (REQUIRES excludes it)
}

absl::StatusOr<PdGuardRelease> ParsePdGuardRelease(std::string_view name) {
  if (name == "completion") return PdGuardRelease::kCompletion;
  if (name == "prefill") return PdGuardRelease::kPrefill;
  return absl::InvalidArgumentError(
      "--pd-prefill-guard-release must be prefill or completion, not '" + std::string(name) + "'");
}

}  // namespace infera::router
