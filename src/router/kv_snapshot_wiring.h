// The router's KV-view snapshots (doc/snapshot.md): the start-up load handed to the ZMQ
// ingestor or the NATS source, the metrics of §10, and the final snapshot at SIGTERM.
//
// Thread-safety: PrepareKvSnapshots runs before the ingestor is made; the rest from any
// thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "events/kv_event_ingestor.h"
#include "events/kv_event_source.h"
#include "events/kv_snapshot_peer.h"
#include "events/nats_event_source.h"
#include "events/shared_kv_index.h"

namespace infera::router {

// With a snapshot path: checks the file (KvSnapshotLoad::Open) and sets the ingestor's
// snapshot options, its stats and the accepted file, whose staging index the ingestor
// builds while the HTTP server already answers (/ready 503 "starting").
// `fetched`: the file a peer join just fetched and checked, and the build streamed
// during its transfer (KvSnapshotPeer::JoinIfNeeded).
void PrepareKvSnapshots(const events::KvSnapshotOptions& options, events::IngestorOptions& ingestor,
                        events::FetchedSnapshot fetched = {});
// The same for the NATS source (§6.4): it restores the file before its first
// subscription and consumes the stream from the snapshot's begin_stream_seq + 1.
void PrepareKvSnapshots(const events::KvSnapshotOptions& options, events::NatsSourceOptions& nats);

// The snapshot families of /metrics (nothing when `source` writes no snapshots).
void RenderKvSnapshotMetrics(const events::KvEventSource& source, std::string& out);

// At SIGTERM, beside the drain (§5.3): Start makes the ingestion thread export every
// view; Wait waits for the file (false at the timeout: the snapshot is abandoned).
void StartFinalKvSnapshot(events::KvEventSource& source);
bool WaitFinalKvSnapshot(events::KvEventSource& source, int64_t timeout_ms);

}  // namespace infera::router
