// The NATS wire names of KV events (architecture §15, doc/nats-transport.md "Wire format").
//
//   stream   INFERA_KV_EVENTS, subjects infera.kv.events.>
//   subject  infera.kv.events.<base64url(worker_id), unpadded>.<dp_rank>
//   payload  the engine's ZMQ payload frame, byte for byte (one msgpack EventBatch)
//   headers  Infera-Seq: the engine's sequence number (decimal); Nats-Msg-Id:
//            <relay instance>.<dp_rank>.<seq> (JetStream drops a relay's own resends)
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/types.h"

namespace infera::events {

inline constexpr std::string_view kNatsStreamName = "INFERA_KV_EVENTS";
inline constexpr std::string_view kNatsSubjectPrefix = "infera.kv.events.";
inline constexpr std::string_view kNatsStreamSubjects = "infera.kv.events.>";
inline constexpr std::string_view kNatsSeqHeader = "Infera-Seq";

// RFC 4648 §5 base64url without padding.
std::string Base64UrlEncode(std::string_view bytes);
// nullopt: not base64url (or padded).
std::optional<std::string> Base64UrlDecode(std::string_view text);

std::string KvEventSubject(const core::TargetKey& key);
// nullopt: not infera.kv.events.<b64url>.<rank>.
std::optional<core::TargetKey> ParseKvEventSubject(std::string_view subject);

}  // namespace infera::events
