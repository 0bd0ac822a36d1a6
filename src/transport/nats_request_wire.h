// The wire format of the NATS request transport (doc/nats-request-transport.md), the one
// Infera's routers and workers speak (AMD-AGI/Infera infera/common/nats_request.py and
// rust/router/src/nats_request.rs), so our router serves Infera's workers and our
// workers serve Infera's routers through the same broker:
//
//   request  router -> `infera.req.<token(worker_id)>`, reply subject = a fresh inbox:
//            JSON {"path": "/v1/...", "stream": bool, "headers": {name: value} | null,
//                  "body": {...}}
//            ("method": "GET" when the request is not a POST: ours, ignored by Infera's
//            workers, which always POST)
//   reply    worker -> inbox, one NATS message per frame, framed by header `rs-type`:
//            data   payload = response bytes (an SSE piece, or the whole JSON body)
//            done   payload empty; `rs-status` = the engine's HTTP status (default 200)
//            error  payload = UTF-8 error text (the proxy failed; no status)
//            A frame without `rs-type`, or with another value, is data (as Infera reads
//            it). Our workers also put `rs-status` and `rs-content-type` on the first
//            frame, so a router learns the answer's status before its body ends.
//   cancel   router -> `infera.cancel.<token(worker_id)>`, payload = the request's
//            inbox: the worker aborts that request's engine exchange.
//
// token(worker_id) is RFC 4648 §5 base64url without padding (a worker id "host:port"
// holds dots, NATS's subject separator). No responders: the server answers a request
// published to a subject nobody subscribes with an empty message carrying header
// `Status: 503` (libnats: natsMsg_IsNoResponders).
//
// Thread-safety: pure functions and value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "http/headers.h"

namespace infera::transport {

inline constexpr std::string_view kRequestSubjectPrefix = "infera.req";
inline constexpr std::string_view kCancelSubjectPrefix = "infera.cancel";
inline constexpr const char* kTypeHeader = "rs-type";
inline constexpr const char* kStatusHeader = "rs-status";
inline constexpr const char* kContentTypeHeader = "rs-content-type";  // ours, first frame
inline constexpr const char* kInboxHeader = "rs-inbox";               // Infera's JetStream mode
inline constexpr const char* kTypeData = "data";
inline constexpr const char* kTypeDone = "done";
inline constexpr const char* kTypeError = "error";

// Bounds of what a worker accepts in a request envelope.
inline constexpr size_t kMaxPathBytes = 2048;
inline constexpr size_t kMaxEnvelopeHeaders = 64;

// base64url(worker_id), unpadded.
std::string WorkerToken(std::string_view worker_id);
// "infera.req.<token>" and "infera.cancel.<token>".
std::string RequestSubject(std::string_view worker_id);
std::string CancelSubject(std::string_view worker_id);

// What the router publishes: the envelope's bytes and whether the body asked to stream.
struct EncodedRequest {
  std::string payload;
  bool stream = false;
};

// Builds the envelope. `body` must be a JSON object (it is embedded as is); its
// top-level "stream" (a boolean) is the envelope's. Header fields named Content-Type,
// Content-Length, Host, Connection or Transfer-Encoding are left out (the worker's
// HTTP client sets them). InvalidArgument: the body is not a JSON object, the method
// is empty.
absl::StatusOr<EncodedRequest> EncodeRequest(std::string_view method, std::string_view path,
                                             const http::Headers& headers, std::string_view body);

// What a worker reads from an envelope.
struct DecodedRequest {
  std::string method = "POST";
  std::string path;
  bool stream = false;
  http::Headers headers;
  std::string body;  // the body object, serialized again
};

// Parses untrusted envelope bytes. InvalidArgument naming the field: not JSON, not an
// object, path missing or not "/..." without whitespace or control bytes (at most
// kMaxPathBytes), stream not a boolean, headers not an object of strings (at most
// kMaxEnvelopeHeaders; a field with CR, LF or NUL is refused), body not an object,
// method not GET or POST.
absl::StatusOr<DecodedRequest> DecodeRequest(std::string_view payload);

// --nats-req-idle-timeout / --nats-req-max-duration (router and workers): seconds from
// the flag when given, else from the environment variable's text `env_value` (null or
// empty: `fallback_s`), in milliseconds. InvalidArgument naming the flag or variable:
// not a number, below 0, above 30 days.
absl::StatusOr<int64_t> TimeoutMs(std::optional<double> flag_s, const char* env_value,
                                  double fallback_s, std::string_view flag_name,
                                  std::string_view env_name);

// Both timeouts within 0 (off) .. 30 days; InvalidArgument naming the flag otherwise.
absl::Status CheckTimeoutsMs(int64_t idle_timeout_ms, int64_t max_duration_ms);

enum class FrameType : uint8_t { kData, kDone, kError };
// The frame type of an `rs-type` value (null: the header is absent -> data).
FrameType ParseFrameType(const char* value);
// An `rs-status` value: an integer 100..599; nullopt otherwise (absent, garbage).
std::optional<int> ParseStatus(const char* value);

// Finds where complete server-sent events end in a byte stream that arrives in pieces:
// an event ends with a blank line (a line terminator at the start of a line; CRLF, LF
// and CR are terminators). Scan() reads the next piece and returns the offset within
// it just past the last blank line it completes, or npos when it completes none; the
// state carries across pieces (a CRLF split between two pieces is one terminator).
class SseBoundary {
 public:
  size_t Scan(std::string_view piece);

 private:
  bool line_start_ = true;   // at the start of a line (the stream's start counts)
  bool cr_pending_ = false;  // the previous byte was CR: a following LF belongs to it
  bool cr_blank_ = false;    // ... and that CR ended a blank line
};

}  // namespace infera::transport
