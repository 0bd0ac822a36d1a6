#include "router/config/identity.h"

#include <cstdint>

namespace infera::router::config {

void ResolveReplicaIdentity(ReplicaSyncOptions& replica, const ConfigSources& sources) {
  if (replica.replica_id.empty()) replica.replica_id = DefaultReplicaId(sources.random_word());
  replica.epoch = static_cast<uint64_t>(sources.unix_ms());
}

std::string RandomTenantSaltKey(const ConfigSources& sources) {
  std::string key;
  for (int i = 0; i < 8; ++i) {
    const uint32_t word = sources.random_word();
    key.append(reinterpret_cast<const char*>(&word), sizeof(word));
  }
  return key;
}

}  // namespace infera::router::config
