// The PD protocols the router speaks, one registration line each (protocol.h), and
// the --pd-prefill-guard-release flag (options.h).
#include <string>

#include "router/dispatch/pd/options.h"
#include "router/dispatch/pd/protocol.h"

namespace infera::router {
namespace {

struct Registration {
  PlanProtocol protocol;
  const PdProtocol& (*leaf)();
};

// A new protocol: its file (a PdProtocol leaf with its leg bodies) and one line here.
constexpr Registration kProtocols[] = {
    {PlanProtocol::kSglangBootstrap, &SglangBootstrapProtocol},
    {PlanProtocol::kVllmNixl, &VllmNixlProtocol},
    {PlanProtocol::kVllmMooncake, &VllmMooncakeProtocol},
};

}  // namespace

const PdProtocol& PdProtocolFor(PlanProtocol protocol) {
  for (const Registration& r : kProtocols) {
    if (r.protocol == protocol) return r.leaf();
  }
  return SglangBootstrapProtocol();  // kMixed: not a pair (REQUIRES excludes it)
}

absl::StatusOr<PdGuardRelease> ParsePdGuardRelease(std::string_view name) {
  if (name == "completion") return PdGuardRelease::kCompletion;
  if (name == "prefill") return PdGuardRelease::kPrefill;
  return absl::InvalidArgumentError(
      "--pd-prefill-guard-release must be prefill or completion, not '" + std::string(name) + "'");
}

}  // namespace infera::router
