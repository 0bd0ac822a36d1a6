#include "transport/nats_request_wire.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "event_wire/nats_subject.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"

namespace infera::transport {
namespace {

using nlohmann::json;

// Fields the worker's own HTTP client writes; a copy from the envelope would clash.
bool HopByHop(std::string_view name) {
  for (std::string_view h : {"Content-Type", "Content-Length", "Host", "Connection",
                             "Transfer-Encoding", "Keep-Alive", "Upgrade", "TE", "Trailer"}) {
    if (http::Headers::EqualsIgnoreCase(name, h)) return true;
  }
  return false;
}

// RFC 9110 token characters.
bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
    if (!ok || c == 0) return false;
  }
  return true;
}

bool SafeValue(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

absl::Status FieldError(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError("request envelope: '" + std::string(field) + "' " +
                                    std::string(what));
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string WorkerToken(std::string_view worker_id) { return events::Base64UrlEncode(worker_id); }

std::string RequestSubject(std::string_view worker_id) {
  return std::string(kRequestSubjectPrefix) + "." + WorkerToken(worker_id);
}

std::string CancelSubject(std::string_view worker_id) {
  return std::string(kCancelSubjectPrefix) + "." + WorkerToken(worker_id);
}

absl::StatusOr<EncodedRequest> EncodeRequest(std::string_view method, std::string_view path,
                                             const http::Headers& headers, std::string_view body) {
  if (method.empty()) return absl::InvalidArgumentError("request envelope: empty method");
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS || !root.is_object()) {
    return absl::InvalidArgumentError(
        "request envelope: the body must be a JSON object (the NATS transport embeds it)");
  }
  EncodedRequest out;
  bool stream = false;
  if (root["stream"].get(stream) == simdjson::SUCCESS) out.stream = stream;
  json fields = json::object();
  for (const http::Headers::Field& f : headers.fields()) {
    if (!HopByHop(f.name)) fields[f.name] = f.value;
  }
  out.payload.reserve(body.size() + 256);
  out.payload += "{\"path\":";
  out.payload += Dump(json(std::string(path)));
  out.payload += out.stream ? ",\"stream\":true,\"headers\":" : ",\"stream\":false,\"headers\":";
  out.payload += fields.empty() ? std::string("null") : Dump(fields);
  if (method != "POST") {
    out.payload += ",\"method\":";
    out.payload += Dump(json(std::string(method)));
  }
  out.payload += ",\"body\":";
  out.payload += body;
  out.payload += "}";
  return out;
}

absl::StatusOr<DecodedRequest> DecodeRequest(std::string_view payload) {
  json root = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("request envelope is not JSON");
  if (!root.is_object()) return absl::InvalidArgumentError("request envelope is not an object");
  DecodedRequest out;
  auto path = root.find("path");
  if (path == root.end() || !path->is_string()) return FieldError("path", "must be a string");
  out.path = path->get<std::string>();
  if (out.path.empty() || out.path[0] != '/' || out.path.size() > kMaxPathBytes) {
    return FieldError("path", "must start with '/' and be at most 2048 bytes");
  }
  for (unsigned char c : out.path) {
    if (c <= 0x20 || c == 0x7f) return FieldError("path", "holds whitespace or a control byte");
  }
  if (auto m = root.find("method"); m != root.end() && !m->is_null()) {
    if (!m->is_string()) return FieldError("method", "must be a string");
    out.method = m->get<std::string>();
    if (out.method != "GET" && out.method != "POST") {
      return FieldError("method", "must be GET or POST");
    }
  }
  if (auto s = root.find("stream"); s != root.end() && !s->is_null()) {
    if (!s->is_boolean()) return FieldError("stream", "must be a boolean");
    out.stream = s->get<bool>();
  }
  if (auto h = root.find("headers"); h != root.end() && !h->is_null()) {
    if (!h->is_object()) return FieldError("headers", "must be an object or null");
    if (h->size() > kMaxEnvelopeHeaders) return FieldError("headers", "has more than 64 fields");
    for (auto it = h->begin(); it != h->end(); ++it) {
      if (!it.value().is_string()) return FieldError("headers", "values must be strings");
      const std::string& value = it.value().get_ref<const std::string&>();
      if (!IsToken(it.key()) || !SafeValue(value)) {
        return FieldError("headers", "holds a field that is not a valid HTTP field");
      }
      if (!HopByHop(it.key())) out.headers.Add(it.key(), value);
    }
  }
  auto body = root.find("body");
  if (body == root.end() || body->is_null()) {
    out.body = "{}";
  } else if (!body->is_object()) {
    return FieldError("body", "must be an object");
  } else {
    out.body = Dump(*body);
  }
  return out;
}

absl::StatusOr<int64_t> TimeoutMs(std::optional<double> flag_s, const char* env_value,
                                  double fallback_s, std::string_view flag_name,
                                  std::string_view env_name) {
  double seconds = fallback_s;
  std::string_view source = flag_name;
  if (flag_s) {
    seconds = *flag_s;
  } else if (env_value != nullptr && *env_value != '\0') {
    source = env_name;
    char* end = nullptr;
    seconds = std::strtod(env_value, &end);
    if (end == env_value || *end != '\0') {
      return absl::InvalidArgumentError(std::string(env_name) +
                                        " must be a number of seconds, got '" + env_value + "'");
    }
  }
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 30 * 86400.0) {
    return absl::InvalidArgumentError(std::string(source) +
                                      " must be seconds >= 0 (0: off) and at most 30 days");
  }
  return static_cast<int64_t>(std::llround(seconds * 1000));
}

absl::Status CheckTimeoutsMs(int64_t idle_timeout_ms, int64_t max_duration_ms) {
  constexpr int64_t kMaxMs = int64_t{30} * 24 * 3600 * 1000;
  if (idle_timeout_ms < 0 || idle_timeout_ms > kMaxMs) {
    return absl::InvalidArgumentError(
        "--nats-req-idle-timeout must be seconds >= 0 (0: off) and at most 30 days");
  }
  if (max_duration_ms < 0 || max_duration_ms > kMaxMs) {
    return absl::InvalidArgumentError(
        "--nats-req-max-duration must be seconds >= 0 (0: off) and at most 30 days");
  }
  return absl::OkStatus();
}

FrameType ParseFrameType(const char* value) {
  if (value == nullptr) return FrameType::kData;
  if (std::strcmp(value, kTypeDone) == 0) return FrameType::kDone;
  if (std::strcmp(value, kTypeError) == 0) return FrameType::kError;
  return FrameType::kData;
}

std::optional<int> ParseStatus(const char* value) {
  if (value == nullptr) return std::nullopt;
  const char* end = value + std::strlen(value);
  int status = 0;
  auto [p, ec] = std::from_chars(value, end, status);
  if (ec != std::errc() || p != end || p == value || status < 100 || status > 599) {
    return std::nullopt;
  }
  return status;
}

size_t SseBoundary::Scan(std::string_view piece) {
  size_t cut = std::string_view::npos;
  for (size_t i = 0; i < piece.size(); ++i) {
    const char c = piece[i];
    if (cr_pending_ && c == '\n') {  // the LF of a CRLF
      cr_pending_ = false;
      if (cr_blank_) cut = i + 1;  // the blank line ends after its LF
      continue;
    }
    cr_pending_ = false;
    if (c == '\r' || c == '\n') {
      const bool blank = line_start_;
      if (blank) cut = i + 1;
      line_start_ = true;
      if (c == '\r') {
        cr_pending_ = true;
        cr_blank_ = blank;
      }
    } else {
      line_start_ = false;
    }
  }
  return cut;
}

}  // namespace infera::transport
