// The JSON of etcd v3's gRPC gateway (etcd 3.4: /v3/kv/*, /v3/watch, /v3/lease/*),
// as pure functions: request bodies out, untrusted response text in.
//
// Wire facts (verified against Debian's etcd 3.4.23, see doc/discovery.md):
//   - keys and values are base64 (standard alphabet, padded);
//   - 64-bit integers (revision, mod_revision, lease ID, TTL, count) are JSON
//     strings; zero-valued fields are omitted ("type" of a PUT event, "TTL" of an
//     unknown lease in a keepalive answer);
//   - streamed answers (/v3/watch, /v3/lease/keepalive) are a sequence of
//     {"result": {...}} or {"error": {...}} objects separated by newlines;
//   - a failed unary call answers a non-200 status and {"error", "message", "code"}
//     where code is the gRPC status code (numerically equal to absl::StatusCode).
//
// Thread-safety: pure functions; JsonObjectSplitter is a value type for one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace infera::discovery {

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
  int64_t lease_id = 0;
};

struct EtcdRangeResult {
  int64_t revision = 0;  // store revision the snapshot was taken at
  std::vector<EtcdKv> kvs;
};

struct EtcdWatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  EtcdKv kv;  // for a delete only key and mod_revision are set
};

// One message of a watch stream.
struct EtcdWatchMessage {
  int64_t revision = 0;  // header revision
  bool created = false;
  bool canceled = false;
  int64_t compact_revision = 0;  // > 0: the start revision was compacted away
  std::string cancel_reason;
  std::vector<EtcdWatchEvent> events;
};

struct EtcdLease {
  int64_t id = 0;
  int64_t ttl_s = 0;  // 0 or less: the lease does not exist (anymore)
};

// The end of the key range holding every key with this prefix: the prefix with its
// last byte incremented (trailing 0xff bytes dropped); "\0" for an empty prefix
// (meaning "all keys" to etcd).
std::string PrefixRangeEnd(std::string_view prefix);

// Request bodies.
std::string RangePrefixRequest(std::string_view prefix);
std::string PutRequest(std::string_view key, std::string_view value, int64_t lease_id);
std::string DeleteKeyRequest(std::string_view key);
std::string WatchPrefixRequest(std::string_view prefix, int64_t start_revision);
std::string CompactionRequest(int64_t revision);
std::string LeaseGrantRequest(int64_t ttl_s);
std::string LeaseIdRequest(int64_t lease_id);  // keepalive and revoke

// Responses. InvalidArgument on anything that is not the documented shape.
absl::StatusOr<EtcdRangeResult> ParseRangeResponse(std::string_view text);
absl::StatusOr<int64_t> ParseHeaderRevision(std::string_view text);  // put, deleterange
absl::StatusOr<EtcdLease> ParseLeaseGrantResponse(std::string_view text);
// One keepalive stream message ({"result": {"ID", "TTL"}}).
absl::StatusOr<EtcdLease> ParseKeepAliveMessage(std::string_view text);
// One watch stream message; an {"error": ...} message becomes its gRPC status.
absl::StatusOr<EtcdWatchMessage> ParseWatchMessage(std::string_view text);
// The status of a non-200 answer: the gateway's gRPC code and message when the body
// has them, else Unavailable (5xx) or Internal naming the HTTP status.
absl::Status GatewayError(int http_status, std::string_view body);

// Splits a byte stream into top-level JSON objects (tracks strings and escapes, so
// it does not depend on the newline separators). Bytes between objects are skipped.
class JsonObjectSplitter {
 public:
  explicit JsonObjectSplitter(size_t max_object_bytes) : max_object_bytes_(max_object_bytes) {}
  // Appends data and moves every completed object into *out. ResourceExhausted when
  // one object exceeds max_object_bytes (the splitter is unusable afterwards).
  absl::Status Feed(std::string_view data, std::vector<std::string>* out);

 private:
  size_t max_object_bytes_;
  std::string current_;
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace infera::discovery
