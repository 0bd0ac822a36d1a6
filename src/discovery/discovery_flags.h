// The router's fleet flags, registered once for `infera-router` and `infera-router
// doctor` (so both take a fleet the same way):
//   --discovery-backend, --worker (repeatable), --workers-file, --etcd-endpoint,
//   --etcd-prefix, --k8s-* (INFERA_K8S_LABEL_SELECTOR)  ->  DiscoveryConfig
//   (CreateDiscovery parses and validates them).
// The config's current values are the flags' defaults.
// Thread-safety: call while building the command line, from one thread.
#pragma once

#include <CLI/CLI.hpp>

#include "discovery/discovery_factory.h"

namespace infera::discovery {

void AddDiscoveryFlags(CLI::App& app, DiscoveryConfig& config);

}  // namespace infera::discovery
