// The wire of the snapshot peer join (doc/snapshot.md §9.1), over NATS core.
//
//   infera.router.snapshot.offer.<b64url(stored fleet id)>   a joiner's request
//       {v:1, fleet, transport, hash_scheme, joiner}
//     answered by every replica with a usable file:
//       {v:1, instance, created_unix_ms, size, chunk_size, chunks, checksum}
//   infera.router.snapshot.chunk.<16 hex digits of the instance>
//       {v:1, created_unix_ms, index}
//     answered with the chunk's raw bytes, or an empty body with the header
//     Infera-Snapshot-Error: gone (the file changed since the offer).
//
// Every payload is a msgpack map; unknown keys are skipped. Decoding is for untrusted
// bytes: anything malformed is InvalidArgument.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace infera::events {

inline constexpr size_t kSnapshotChunkBytes = 512 * 1024;  // below NATS's 1 MiB max payload
inline constexpr std::string_view kSnapshotErrorHeader = "Infera-Snapshot-Error";

// `fleet_id` in its stored form (StoredFleetId).
std::string SnapshotOfferSubject(std::string_view fleet_id);
std::string SnapshotChunkSubject(uint64_t instance);

struct SnapshotOfferRequest {
  uint64_t version = 1;
  std::string fleet;  // stored form
  uint8_t transport = 0;
  uint32_t hash_scheme = 0;
  uint64_t joiner = 0;  // the joiner's instance
};

struct SnapshotOffer {
  uint64_t version = 1;
  uint64_t instance = 0;  // the offering replica's (its chunk subject)
  int64_t created_unix_ms = 0;
  uint64_t size = 0;
  uint64_t chunk_size = 0;
  uint64_t chunks = 0;
  uint64_t checksum = 0;  // the file's footer checksum
};

struct SnapshotChunkRequest {
  uint64_t version = 1;
  int64_t created_unix_ms = 0;  // the offer's: a changed file answers "gone"
  uint64_t index = 0;
};

std::string EncodeOfferRequest(const SnapshotOfferRequest& request);
std::string EncodeOffer(const SnapshotOffer& offer);
std::string EncodeChunkRequest(const SnapshotChunkRequest& request);
absl::StatusOr<SnapshotOfferRequest> DecodeOfferRequest(std::span<const uint8_t> payload);
absl::StatusOr<SnapshotOffer> DecodeOffer(std::span<const uint8_t> payload);
absl::StatusOr<SnapshotChunkRequest> DecodeChunkRequest(std::span<const uint8_t> payload);

// Whether an offer's sizes agree with each other: chunk_size 1..1 MiB, chunks =
// ceil(size / chunk_size), size at least a header and a footer.
bool OfferShapeValid(const SnapshotOffer& offer);

}  // namespace infera::events
