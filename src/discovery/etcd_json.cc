#include "discovery/etcd_json.h"

#include <charconv>

#include "absl/strings/escaping.h"
#include "discovery/internal/str_cat.h"
#include "nlohmann/json.hpp"

namespace infera::discovery {
namespace {

using internal::Cat;
using nlohmann::json;

std::string Base64(std::string_view bytes) {
  return absl::Base64Escape(absl::string_view(bytes.data(), bytes.size()));
}

absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(Cat("etcd gateway: malformed response: ", what));
}

absl::StatusOr<json> ParseObject(std::string_view text) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) return Malformed("not a JSON object");
  return parsed;
}

// A 64-bit integer field: a JSON string of digits (the gateway's encoding) or a
// number; absent or null means 0.
absl::StatusOr<int64_t> Int64Field(const json& obj, std::string_view field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return int64_t{0};
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (!s.empty() && ec == std::errc() && end == s.data() + s.size()) return v;
  }
  return Malformed(Cat("field '", field, "' is not a 64-bit integer"));
}

absl::StatusOr<std::string> Base64Field(const json& obj, std::string_view field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Malformed(Cat("field '", field, "' is not a string"));
  std::string decoded;
  if (!absl::Base64Unescape(it->get_ref<const std::string&>(), &decoded)) {
    return Malformed(Cat("field '", field, "' is not base64"));
  }
  return decoded;
}

absl::StatusOr<EtcdKv> ParseKv(const json& kv) {
  if (!kv.is_object()) return Malformed("kv is not an object");
  EtcdKv out;
  auto key = Base64Field(kv, "key");
  if (!key.ok()) return key.status();
  auto value = Base64Field(kv, "value");
  if (!value.ok()) return value.status();
  auto mod = Int64Field(kv, "mod_revision");
  if (!mod.ok()) return mod.status();
  auto lease = Int64Field(kv, "lease");
  if (!lease.ok()) return lease.status();
  out.key = *std::move(key);
  out.value = *std::move(value);
  out.mod_revision = *mod;
  out.lease_id = *lease;
  return out;
}

absl::StatusOr<int64_t> HeaderRevision(const json& obj) {
  auto header = obj.find("header");
  if (header == obj.end() || !header->is_object()) return Malformed("no header");
  return Int64Field(*header, "revision");
}

// The status carried by an {"error": ...} stream message or error body.
absl::Status StatusFromError(const json& obj, std::string_view fallback) {
  const json* err = &obj;
  if (auto it = obj.find("error"); it != obj.end() && it->is_object()) err = &*it;
  int code = static_cast<int>(absl::StatusCode::kUnknown);
  if (auto c = err->find("code"); c != err->end() && c->is_number_integer()) {
    code = c->get<int>();
  } else if (auto g = err->find("grpc_code"); g != err->end() && g->is_number_integer()) {
    code = g->get<int>();
  }
  std::string message(fallback);
  if (auto m = err->find("message"); m != err->end() && m->is_string()) {
    message = m->get<std::string>();
  } else if (auto e = obj.find("error"); e != obj.end() && e->is_string()) {
    message = e->get<std::string>();
  }
  if (code <= 0 || code > 16) code = static_cast<int>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code), Cat("etcd: ", message));
}

}  // namespace

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

std::string RangePrefixRequest(std::string_view prefix) {
  return json{{"key", Base64(prefix)}, {"range_end", Base64(PrefixRangeEnd(prefix))}}.dump();
}

std::string PutRequest(std::string_view key, std::string_view value, int64_t lease_id) {
  json body = {{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease_id != 0) body["lease"] = std::to_string(lease_id);
  return body.dump();
}

std::string DeleteKeyRequest(std::string_view key) { return json{{"key", Base64(key)}}.dump(); }

std::string WatchPrefixRequest(std::string_view prefix, int64_t start_revision) {
  json create = {{"key", Base64(prefix)}, {"range_end", Base64(PrefixRangeEnd(prefix))}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  return json{{"create_request", create}}.dump();
}

std::string CompactionRequest(int64_t revision) {
  return json{{"revision", std::to_string(revision)}}.dump();
}

std::string LeaseGrantRequest(int64_t ttl_s) { return json{{"TTL", std::to_string(ttl_s)}}.dump(); }

std::string LeaseIdRequest(int64_t lease_id) {
  return json{{"ID", std::to_string(lease_id)}}.dump();
}

absl::StatusOr<EtcdRangeResult> ParseRangeResponse(std::string_view text) {
  auto obj = ParseObject(text);
  if (!obj.ok()) return obj.status();
  EtcdRangeResult out;
  auto revision = HeaderRevision(*obj);
  if (!revision.ok()) return revision.status();
  out.revision = *revision;
  if (auto kvs = obj->find("kvs"); kvs != obj->end() && !kvs->is_null()) {
    if (!kvs->is_array()) return Malformed("kvs is not an array");
    for (const json& kv : *kvs) {
      auto parsed = ParseKv(kv);
      if (!parsed.ok()) return parsed.status();
      out.kvs.push_back(*std::move(parsed));
    }
  }
  return out;
}

absl::StatusOr<int64_t> ParseHeaderRevision(std::string_view text) {
  auto obj = ParseObject(text);
  if (!obj.ok()) return obj.status();
  return HeaderRevision(*obj);
}

absl::StatusOr<EtcdLease> ParseLeaseGrantResponse(std::string_view text) {
  auto obj = ParseObject(text);
  if (!obj.ok()) return obj.status();
  if (auto err = obj->find("error");
      err != obj->end() && !err->is_null() &&
      !(err->is_string() && err->get_ref<const std::string&>().empty())) {
    return StatusFromError(*obj, "lease grant failed");
  }
  auto id = Int64Field(*obj, "ID");
  if (!id.ok()) return id.status();
  auto ttl = Int64Field(*obj, "TTL");
  if (!ttl.ok()) return ttl.status();
  if (*id == 0) return Malformed("lease grant without an ID");
  return EtcdLease{*id, *ttl};
}

absl::StatusOr<EtcdLease> ParseKeepAliveMessage(std::string_view text) {
  auto obj = ParseObject(text);
  if (!obj.ok()) return obj.status();
  auto result = obj->find("result");
  if (result == obj->end() || !result->is_object()) {
    if (obj->contains("error")) return StatusFromError(*obj, "keepalive failed");
    return Malformed("keepalive message without result");
  }
  auto id = Int64Field(*result, "ID");
  if (!id.ok()) return id.status();
  auto ttl = Int64Field(*result, "TTL");
  if (!ttl.ok()) return ttl.status();
  return EtcdLease{*id, *ttl};
}

absl::StatusOr<EtcdWatchMessage> ParseWatchMessage(std::string_view text) {
  auto obj = ParseObject(text);
  if (!obj.ok()) return obj.status();
  auto result = obj->find("result");
  if (result == obj->end() || !result->is_object()) {
    if (obj->contains("error")) return StatusFromError(*obj, "watch failed");
    return Malformed("watch message without result");
  }
  const json& r = *result;
  EtcdWatchMessage out;
  if (auto header = r.find("header"); header != r.end() && header->is_object()) {
    auto revision = Int64Field(*header, "revision");
    if (!revision.ok()) return revision.status();
    out.revision = *revision;
  }
  auto flag = [&](const char* name) {
    auto it = r.find(name);
    return it != r.end() && it->is_boolean() && it->get<bool>();
  };
  out.created = flag("created");
  out.canceled = flag("canceled");
  auto compact = Int64Field(r, "compact_revision");
  if (!compact.ok()) return compact.status();
  out.compact_revision = *compact;
  if (auto reason = r.find("cancel_reason"); reason != r.end() && reason->is_string()) {
    out.cancel_reason = reason->get<std::string>();
  }
  if (auto events = r.find("events"); events != r.end() && !events->is_null()) {
    if (!events->is_array()) return Malformed("events is not an array");
    for (const json& e : *events) {
      if (!e.is_object()) return Malformed("event is not an object");
      EtcdWatchEvent event;
      if (auto type = e.find("type"); type != e.end() && !type->is_null()) {
        if (*type == "DELETE" || *type == 1) {
          event.type = EtcdWatchEvent::Type::kDelete;
        } else if (!(*type == "PUT" || *type == 0)) {
          return Malformed("unknown event type");
        }
      }
      auto kv = e.find("kv");
      if (kv == e.end()) return Malformed("event without kv");
      auto parsed = ParseKv(*kv);
      if (!parsed.ok()) return parsed.status();
      event.kv = *std::move(parsed);
      out.events.push_back(std::move(event));
    }
  }
  return out;
}

absl::Status GatewayError(int http_status, std::string_view body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_discarded() && parsed.is_object() &&
      (parsed.contains("code") || parsed.contains("error"))) {
    return StatusFromError(parsed, Cat("HTTP ", http_status));
  }
  std::string what = Cat("etcd gateway answered HTTP ", http_status);
  if (http_status >= 500) return absl::UnavailableError(what);
  return absl::InternalError(what);
}

absl::Status JsonObjectSplitter::Feed(std::string_view data, std::vector<std::string>* out) {
  for (char c : data) {
    if (depth_ == 0) {
      if (c != '{') continue;  // separators (newlines) between objects
      current_.clear();
    }
    current_.push_back(c);
    if (current_.size() > max_object_bytes_) {
      return absl::ResourceExhaustedError(
          Cat("etcd gateway: stream message over ", max_object_bytes_, " bytes"));
    }
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) {
        out->push_back(std::move(current_));
        current_.clear();
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace infera::discovery
