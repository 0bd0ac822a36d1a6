#include "discovery/etcd_client.h"

#include "discovery/internal/http_call.h"
#include "discovery/internal/str_cat.h"

namespace infera::discovery {
namespace {

using internal::Cat;

constexpr size_t kMaxStreamMessageBytes = 16 * 1024 * 1024;

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdClientOptions options) {
  std::vector<Endpoint> endpoints;
  std::string_view list = options.endpoints;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (item.substr(0, 7) == "http://") item.remove_prefix(7);
    while (!item.empty() && item.back() == '/') item.remove_suffix(1);
    size_t colon = item.rfind(':');
    if (item.empty() || colon == std::string_view::npos || colon == 0 || colon + 1 == item.size() ||
        item.substr(colon + 1).find_first_not_of("0123456789") != std::string_view::npos) {
      return absl::InvalidArgumentError(
          Cat("etcd endpoint must be host:port or http://host:port, got '", item, "'"));
    }
    endpoints.push_back({std::string(item.substr(0, colon)), std::string(item.substr(colon + 1))});
  }
  if (endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoint given");
  if (options.request_timeout_ms <= 0 || options.watch_idle_timeout_ms <= 0) {
    return absl::InvalidArgumentError("etcd timeouts must be positive");
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options), std::move(endpoints)));
}

EtcdClient::EtcdClient(EtcdClientOptions options, std::vector<Endpoint> endpoints)
    : options_(std::move(options)), endpoints_(std::move(endpoints)) {}

std::string EtcdClient::current_endpoint() const {
  const Endpoint& ep = endpoints_[endpoint_index_.load() % endpoints_.size()];
  return Cat(ep.host, ":", ep.port);
}

absl::Status EtcdClient::Post(std::string_view path, const std::string& body, bool streaming,
                              const std::function<absl::Status(std::string_view)>& on_data) {
  const Endpoint endpoint = endpoints_[endpoint_index_.load() % endpoints_.size()];
  internal::HttpEndpoint ep;
  ep.host = endpoint.host;
  ep.port = endpoint.port;
  internal::HttpCallOptions call;
  call.method = "POST";
  call.target = std::string(path);
  call.body = body;
  call.content_type = "application/json";
  call.streaming = streaming;
  call.request_timeout_ms = options_.request_timeout_ms;
  call.idle_timeout_ms = options_.watch_idle_timeout_ms;
  call.max_response_bytes = options_.max_response_bytes;
  call.service = "etcd";
  bool connect_failed = false;
  auto result = internal::HttpCall(ep, call, cancelled_, on_data, &connect_failed);
  if (connect_failed && endpoints_.size() > 1) endpoint_index_.fetch_add(1);
  if (!result.ok()) return result.status();
  if (result->status != 200) return GatewayError(result->status, result->error_body);
  if (streaming) return absl::UnavailableError(Cat("etcd ", ep.Name(), ": stream ended"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> EtcdClient::PostUnary(std::string_view path, const std::string& body) {
  std::string response;
  absl::Status s = Post(path, body, /*streaming=*/false, [&](std::string_view data) {
    response.append(data);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<EtcdRangeResult> EtcdClient::RangePrefix(std::string_view prefix) {
  auto response = PostUnary("/v3/kv/range", RangePrefixRequest(prefix));
  if (!response.ok()) return response.status();
  return ParseRangeResponse(*response);
}

absl::StatusOr<int64_t> EtcdClient::Put(std::string_view key, std::string_view value,
                                        int64_t lease_id) {
  auto response = PostUnary("/v3/kv/put", PutRequest(key, value, lease_id));
  if (!response.ok()) return response.status();
  return ParseHeaderRevision(*response);
}

absl::StatusOr<int64_t> EtcdClient::DeleteKey(std::string_view key) {
  auto response = PostUnary("/v3/kv/deleterange", DeleteKeyRequest(key));
  if (!response.ok()) return response.status();
  return ParseHeaderRevision(*response);
}

absl::Status EtcdClient::Compact(int64_t revision) {
  auto response = PostUnary("/v3/kv/compaction", CompactionRequest(revision));
  if (!response.ok()) return response.status();
  return ParseHeaderRevision(*response).status();
}

absl::StatusOr<EtcdLease> EtcdClient::LeaseGrant(int64_t ttl_s) {
  auto response = PostUnary("/v3/lease/grant", LeaseGrantRequest(ttl_s));
  if (!response.ok()) return response.status();
  return ParseLeaseGrantResponse(*response);
}

absl::StatusOr<EtcdLease> EtcdClient::LeaseKeepAlive(int64_t lease_id) {
  // The gateway maps the bidirectional keepalive stream onto one POST: our body is
  // one request message, the answer one {"result": ...} message, then the stream ends.
  auto response = PostUnary("/v3/lease/keepalive", LeaseIdRequest(lease_id));
  if (!response.ok()) return response.status();
  JsonObjectSplitter splitter(kMaxStreamMessageBytes);
  std::vector<std::string> messages;
  if (auto s = splitter.Feed(*response, &messages); !s.ok()) return s;
  if (messages.empty()) return absl::UnavailableError("etcd: empty keepalive answer");
  return ParseKeepAliveMessage(messages.front());
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease_id) {
  auto response = PostUnary("/v3/lease/revoke", LeaseIdRequest(lease_id));
  if (!response.ok()) return response.status();
  return ParseHeaderRevision(*response).status();
}

absl::Status EtcdClient::WatchPrefix(
    std::string_view prefix, int64_t start_revision,
    const std::function<absl::Status(const EtcdWatchMessage&)>& on_message) {
  JsonObjectSplitter splitter(kMaxStreamMessageBytes);
  std::vector<std::string> messages;
  return Post("/v3/watch", WatchPrefixRequest(prefix, start_revision), /*streaming=*/true,
              [&](std::string_view data) -> absl::Status {
                messages.clear();
                if (auto s = splitter.Feed(data, &messages); !s.ok()) return s;
                for (const std::string& text : messages) {
                  auto message = ParseWatchMessage(text);
                  if (!message.ok()) return message.status();
                  if (auto s = on_message(*message); !s.ok()) return s;
                }
                return absl::OkStatus();
              });
}

}  // namespace infera::discovery
