#include "events/kv_snapshot_peer_wire.h"

#include <cstdio>

#include "event_wire/msgpack_reader.h"
#include "event_wire/msgpack_writer.h"
#include "event_wire/nats_subject.h"
#include "events/kv_snapshot.h"

namespace infera::events {
namespace {

constexpr uint64_t kMaxChunkBytes = 1024 * 1024;
constexpr size_t kMaxPayloadBytes = 4096;  // every message of §9.1 is a few dozen bytes

absl::Status Bad(std::string_view message, std::string_view what) {
  return absl::InvalidArgumentError("snapshot " + std::string(message) + ": " + std::string(what));
}

// Reads a map whose values are integers or strings; `field(key, reader)` consumes the
// value of a known key (returns its bit, or 0 when it failed) and returns ~0 for an
// unknown one (skipped). Returns the bits of the keys seen, or the error.
template <typename Field>
absl::StatusOr<uint32_t> ReadMap(std::span<const uint8_t> payload, std::string_view message,
                                 Field field) {
  if (payload.size() > kMaxPayloadBytes) return Bad(message, "larger than the limit");
  MsgpackReader r(payload);
  uint32_t fields = 0;
  if (!r.ReadMapHeader(fields)) return Bad(message, "not a map");
  uint32_t seen = 0;
  for (uint32_t i = 0; i < fields; ++i) {
    std::string_view key;
    if (!r.ReadStr(key)) return Bad(message, "a key is not a string");
    const uint32_t bit = field(key, r);
    if (bit == ~0u) {
      if (!r.Skip()) return Bad(message, "an unknown key's value");
    } else if (bit == 0 || r.failed()) {
      return Bad(message, key);
    } else {
      seen |= bit;
    }
  }
  if (!r.AtEnd()) return Bad(message, "trailing bytes");
  return seen;
}

uint32_t Uint(MsgpackReader& r, uint64_t& out, uint32_t bit) { return r.ReadUint(out) ? bit : 0; }

uint32_t Int(MsgpackReader& r, int64_t& out, uint32_t bit) { return r.ReadInt(out) ? bit : 0; }

absl::Status Check(absl::StatusOr<uint32_t> seen, uint32_t required, uint64_t version,
                   std::string_view message) {
  if (!seen.ok()) return seen.status();
  if ((*seen & required) != required) return Bad(message, "a required key is missing");
  if (version != 1) return Bad(message, "version " + std::to_string(version));
  return absl::OkStatus();
}

}  // namespace

std::string SnapshotOfferSubject(std::string_view fleet_id) {
  return "infera.router.snapshot.offer." + Base64UrlEncode(fleet_id);
}

std::string SnapshotChunkSubject(uint64_t instance) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(instance));
  return std::string("infera.router.snapshot.chunk.") + hex;
}

std::string EncodeOfferRequest(const SnapshotOfferRequest& q) {
  std::string out;
  MsgpackWriter w(out);
  w.Map(5);
  w.Str("v");
  w.Uint(q.version);
  w.Str("fleet");
  w.Str(q.fleet);
  w.Str("transport");
  w.Uint(q.transport);
  w.Str("hash_scheme");
  w.Uint(q.hash_scheme);
  w.Str("joiner");
  w.Uint(q.joiner);
  return out;
}

std::string EncodeOffer(const SnapshotOffer& o) {
  std::string out;
  MsgpackWriter w(out);
  w.Map(7);
  w.Str("v");
  w.Uint(o.version);
  w.Str("instance");
  w.Uint(o.instance);
  w.Str("created_unix_ms");
  w.Int(o.created_unix_ms);
  w.Str("size");
  w.Uint(o.size);
  w.Str("chunk_size");
  w.Uint(o.chunk_size);
  w.Str("chunks");
  w.Uint(o.chunks);
  w.Str("checksum");
  w.Uint(o.checksum);
  return out;
}

std::string EncodeChunkRequest(const SnapshotChunkRequest& q) {
  std::string out;
  MsgpackWriter w(out);
  w.Map(3);
  w.Str("v");
  w.Uint(q.version);
  w.Str("created_unix_ms");
  w.Int(q.created_unix_ms);
  w.Str("index");
  w.Uint(q.index);
  return out;
}

absl::StatusOr<SnapshotOfferRequest> DecodeOfferRequest(std::span<const uint8_t> payload) {
  SnapshotOfferRequest q;
  auto seen = ReadMap(payload, "offer request", [&](std::string_view key, MsgpackReader& r) {
    uint64_t v = 0;
    if (key == "v") return Uint(r, q.version, 1);
    if (key == "fleet") {
      std::string_view s;
      if (!r.ReadStr(s)) return 0u;
      q.fleet = std::string(s);
      return 2u;
    }
    if (key == "transport") {
      if (!r.ReadUint(v) || v > 255) return 0u;
      q.transport = static_cast<uint8_t>(v);
      return 4u;
    }
    if (key == "hash_scheme") {
      if (!r.ReadUint(v) || v > UINT32_MAX) return 0u;
      q.hash_scheme = static_cast<uint32_t>(v);
      return 8u;
    }
    if (key == "joiner") return Uint(r, q.joiner, 16);
    return ~0u;
  });
  if (absl::Status s = Check(seen, 31, q.version, "offer request"); !s.ok()) return s;
  return q;
}

absl::StatusOr<SnapshotOffer> DecodeOffer(std::span<const uint8_t> payload) {
  SnapshotOffer o;
  auto seen = ReadMap(payload, "offer", [&](std::string_view key, MsgpackReader& r) {
    if (key == "v") return Uint(r, o.version, 1);
    if (key == "instance") return Uint(r, o.instance, 2);
    if (key == "created_unix_ms") return Int(r, o.created_unix_ms, 4);
    if (key == "size") return Uint(r, o.size, 8);
    if (key == "chunk_size") return Uint(r, o.chunk_size, 16);
    if (key == "chunks") return Uint(r, o.chunks, 32);
    if (key == "checksum") return Uint(r, o.checksum, 64);
    return ~0u;
  });
  if (absl::Status s = Check(seen, 127, o.version, "offer"); !s.ok()) return s;
  return o;
}

absl::StatusOr<SnapshotChunkRequest> DecodeChunkRequest(std::span<const uint8_t> payload) {
  SnapshotChunkRequest q;
  auto seen = ReadMap(payload, "chunk request", [&](std::string_view key, MsgpackReader& r) {
    if (key == "v") return Uint(r, q.version, 1);
    if (key == "created_unix_ms") return Int(r, q.created_unix_ms, 2);
    if (key == "index") return Uint(r, q.index, 4);
    return ~0u;
  });
  if (absl::Status s = Check(seen, 7, q.version, "chunk request"); !s.ok()) return s;
  return q;
}

bool OfferShapeValid(const SnapshotOffer& o) {
  if (o.chunk_size == 0 || o.chunk_size > kMaxChunkBytes) return false;
  if (o.size < kSnapshotHeaderBytes + kSnapshotFooterBytes) return false;
  return o.chunks == (o.size + o.chunk_size - 1) / o.chunk_size;
}

}  // namespace infera::events
