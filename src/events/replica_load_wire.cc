#include "events/replica_load_wire.h"

#include <algorithm>

#include <utility>

#include "event_wire/msgpack_reader.h"
#include "event_wire/msgpack_writer.h"
#include "event_wire/nats_subject.h"

namespace infera::events {
namespace {

// The header map's encoding with `targets` entries.
std::string EncodeOne(const core::RemoteLoadMessage& m, uint64_t seq,
                      std::span<const core::RemoteTargetLoad> targets) {
  std::string out;
  MsgpackWriter w(out);
  w.Map(7);
  w.Str("v");
  w.Uint(m.version);
  w.Str("replica");
  w.Str(m.replica);
  w.Str("epoch");
  w.Uint(m.epoch);
  w.Str("seq");
  w.Uint(seq);
  w.Str("kind");
  w.Str(m.kind == core::RemoteLoadKind::kSnapshot ? "snapshot" : "delta");
  w.Str("ts_ms");
  w.Uint(m.ts_ms);
  w.Str("targets");
  w.Array(targets.size());
  for (const core::RemoteTargetLoad& t : targets) {
    w.Array(6);
    w.Str(t.worker_id);
    w.Uint(t.dp_rank);
    w.Int(t.active_blocks);
    w.Double(t.pending_prefill_blocks);
    w.Int(t.demand_tokens);
    w.Int(t.demand_requests);
  }
  return out;
}

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError("replica load message: " + std::string(what));
}

}  // namespace

std::string ReplicaLoadSubject(std::string_view replica_id) {
  return std::string(kReplicaLoadSubjectPrefix) + Base64UrlEncode(replica_id);
}

std::vector<std::string> EncodeReplicaLoad(const core::RemoteLoadMessage& message,
                                           size_t max_bytes) {
  std::vector<std::string> parts;
  std::span<const core::RemoteTargetLoad> rest(message.targets);
  uint64_t seq = message.seq;
  do {
    // Greedy: the longest prefix that fits (halving on overflow); one target that
    // does not fit alone still goes out alone (the receiver rejects it).
    size_t n = rest.size();
    std::string payload = EncodeOne(message, seq, rest.first(n));
    while (payload.size() > max_bytes && n > 1) {
      n /= 2;
      payload = EncodeOne(message, seq, rest.first(n));
    }
    parts.push_back(std::move(payload));
    rest = rest.subspan(n);
    ++seq;
  } while (!rest.empty());
  return parts;
}

absl::StatusOr<core::RemoteLoadMessage> DecodeReplicaLoad(std::span<const uint8_t> payload,
                                                          size_t max_bytes) {
  if (payload.size() > max_bytes) return Bad("larger than the limit");
  MsgpackReader r(payload);
  uint32_t fields = 0;
  if (!r.ReadMapHeader(fields)) return Bad("not a map");
  core::RemoteLoadMessage m;
  bool has_version = false, has_replica = false, has_epoch = false, has_seq = false,
       has_kind = false, has_targets = false;
  for (uint32_t i = 0; i < fields; ++i) {
    std::string_view key;
    if (!r.ReadStr(key)) return Bad("a key is not a string");
    if (key == "v") {
      if (!r.ReadUint(m.version)) return Bad("v");
      has_version = true;
    } else if (key == "replica") {
      std::string_view s;
      if (!r.ReadStr(s)) return Bad("replica");
      m.replica = std::string(s);
      has_replica = true;
    } else if (key == "epoch") {
      if (!r.ReadUint(m.epoch)) return Bad("epoch");
      has_epoch = true;
    } else if (key == "seq") {
      if (!r.ReadUint(m.seq)) return Bad("seq");
      has_seq = true;
    } else if (key == "kind") {
      std::string_view s;
      if (!r.ReadStr(s)) return Bad("kind");
      if (s == "delta") {
        m.kind = core::RemoteLoadKind::kDelta;
      } else if (s == "snapshot") {
        m.kind = core::RemoteLoadKind::kSnapshot;
      } else {
        return Bad("kind is neither delta nor snapshot");
      }
      has_kind = true;
    } else if (key == "ts_ms") {
      if (!r.ReadUint(m.ts_ms)) return Bad("ts_ms");
    } else if (key == "targets") {
      uint32_t n = 0;
      if (!r.ReadArrayHeader(n)) return Bad("targets");
      // A target takes at least 8 bytes on the wire (array header, empty string, five
      // one-byte numbers): a count the payload cannot hold is not reserved for.
      m.targets.reserve(std::min<size_t>(n, payload.size() / 8));
      for (uint32_t j = 0; j < n; ++j) {
        uint32_t width = 0;
        if (!r.ReadArrayHeader(width) || width != 6) return Bad("a target is not 6 items");
        core::RemoteTargetLoad t;
        std::string_view worker;
        uint64_t rank = 0;
        if (!r.ReadStr(worker) || !r.ReadUint(rank) || rank > UINT32_MAX ||
            !r.ReadInt(t.active_blocks) || !r.ReadNumber(t.pending_prefill_blocks) ||
            !r.ReadInt(t.demand_tokens) || !r.ReadInt(t.demand_requests)) {
          return Bad("a target's fields");
        }
        t.worker_id = std::string(worker);
        t.dp_rank = static_cast<uint32_t>(rank);
        m.targets.push_back(std::move(t));
      }
      has_targets = true;
    } else if (!r.Skip()) {
      return Bad("an unknown key's value");
    }
  }
  if (!r.AtEnd()) return Bad("trailing bytes");
  if (!has_version || !has_replica || !has_epoch || !has_seq || !has_kind || !has_targets) {
    return Bad("a required key is missing");
  }
  return m;
}

}  // namespace infera::events
