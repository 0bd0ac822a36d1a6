// CreateDiscovery: the Discovery backend the router's flags ask for.
//
//   DiscoveryConfig config;
//   config.backend = "etcd";                 // --discovery-backend
//   config.etcd_endpoint = "etcd:2379";      // --etcd-endpoint
//   auto discovery = CreateDiscovery(config);  // StatusOr<unique_ptr<Discovery>>
//
// backend: "static" (--worker flags and/or --workers-file), "etcd", or "" (auto:
// static when workers are given, else etcd). "kubernetes" is not available in this
// build (Unimplemented). Bad flags, a bad workers file, or workers given together
// with the etcd backend are InvalidArgument with a message naming the flag.
// Thread-safety: pure function (reads the workers file).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "discovery/discovery.h"

namespace infera::discovery {

struct DiscoveryConfig {
  std::string backend;                    // --discovery-backend
  std::vector<std::string> worker_flags;  // --worker, repeated
  std::string workers_file;               // --workers-file
  std::string etcd_endpoint = "127.0.0.1:2379";
  std::string etcd_prefix = "/infera/workers/";
};

absl::StatusOr<std::unique_ptr<Discovery>> CreateDiscovery(const DiscoveryConfig& config);

}  // namespace infera::discovery
