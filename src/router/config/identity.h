// What the router draws from randomness and the clock at start: a replica's default
// id and its epoch (doc/replica-sync.md), a random tenant salt key (doc/router.md
// "Tenant isolation"). Through ConfigSources, so tests pin them.
#pragma once

#include <string>

#include "router/config/config_sources.h"
#include "router/router.h"

namespace infera::router::config {

// An empty replica_id becomes `<hostname>:<pid>:<random>`; the epoch is the wall clock
// in ms, so a restarted replica that keeps its id starts a newer epoch.
void ResolveReplicaIdentity(ReplicaSyncOptions& replica, const ConfigSources& sources);

// 32 random bytes: the key of --tenant-cache-salt without --tenant-cache-salt-key-file.
std::string RandomTenantSaltKey(const ConfigSources& sources);

}  // namespace infera::router::config
