// The router's KV-view snapshots (doc/snapshot.md): the start-up load before the ZMQ
// ingestor subscribes, the metrics of §10, and the final snapshot at SIGTERM.
//
// Thread-safety: PrepareKvSnapshots runs before any other thread uses the index; the
// rest from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "events/kv_event_ingestor.h"
#include "events/kv_event_source.h"
#include "events/shared_kv_index.h"

namespace infera::router {

// With a snapshot path: loads the file into `index` (LoadKvSnapshot) and sets the
// ingestor's snapshot options, its stats and the restored targets it verifies.
void PrepareKvSnapshots(const events::KvSnapshotOptions& options, events::SharedKvIndex& index,
                        events::IngestorOptions& ingestor);

// The snapshot families of /metrics (nothing when `source` writes no snapshots).
void RenderKvSnapshotMetrics(const events::KvEventSource& source, std::string& out);

// At SIGTERM, beside the drain (§5.3): Start makes the ingestion thread export every
// view; Wait waits for the file (false at the timeout: the snapshot is abandoned).
void StartFinalKvSnapshot(events::KvEventSource& source);
bool WaitFinalKvSnapshot(events::KvEventSource& source, int64_t timeout_ms);

}  // namespace infera::router
