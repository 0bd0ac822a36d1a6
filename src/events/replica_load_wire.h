// The wire of router replicas' load messages (doc/replica-sync.md, "Wire").
//
//   subject  infera.router.load.<base64url(replica_id), unpadded> (NATS core)
//   payload  msgpack map {"v":1, "replica":str, "epoch":u64, "seq":u64,
//            "kind":"delta"|"snapshot", "ts_ms":u64,
//            "targets":[[worker_id, dp_rank, active_blocks, pending_prefill_blocks,
//                        demand_tokens, demand_requests], ...]}
//            at most kReplicaLoadMaxBytes; unknown keys are skipped.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/remote_load.h"

namespace infera::events {

inline constexpr std::string_view kReplicaLoadSubjectPrefix = "infera.router.load.";
inline constexpr std::string_view kReplicaLoadSubjects = "infera.router.load.*";
inline constexpr size_t kReplicaLoadMaxBytes = 64 * 1024;

std::string ReplicaLoadSubject(std::string_view replica_id);

// Encodes `message` as one payload, or as several (each at most max_bytes) with
// consecutive seqs from message.seq when its targets do not fit in one; every part
// keeps the kind and ts_ms. An empty target list is one payload. Returns the
// payloads in seq order (the sender's next seq is message.seq + size()).
std::vector<std::string> EncodeReplicaLoad(const core::RemoteLoadMessage& message,
                                           size_t max_bytes = kReplicaLoadMaxBytes);

// InvalidArgument on anything but a well-formed payload of at most max_bytes.
// Value checks (ranges, id lengths) are core::RemoteLoad's.
absl::StatusOr<core::RemoteLoadMessage> DecodeReplicaLoad(std::span<const uint8_t> payload,
                                                          size_t max_bytes = kReplicaLoadMaxBytes);

}  // namespace infera::events
