#include "discovery/etcd_client.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>

#include "discovery/internal/str_cat.h"

namespace infera::discovery {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using internal::Cat;

constexpr size_t kMaxErrorBodyBytes = 64 * 1024;
constexpr size_t kMaxStreamMessageBytes = 16 * 1024 * 1024;

absl::Status IoError(std::string_view step, const std::string& endpoint,
                     const beast::error_code& ec) {
  std::string what = Cat("etcd ", endpoint, ": ", step, ": ", ec.message());
  if (ec == beast::error::timeout) return absl::DeadlineExceededError(what);
  return absl::UnavailableError(what);
}

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
  if (cancelled()) return absl::CancelledError("etcd client cancelled");
  const Endpoint endpoint = endpoints_[endpoint_index_.load() % endpoints_.size()];
  const std::string endpoint_name = Cat(endpoint.host, ":", endpoint.port);
  const auto request_timeout = std::chrono::milliseconds(options_.request_timeout_ms);
  const auto idle_timeout = std::chrono::milliseconds(options_.watch_idle_timeout_ms);
  const auto deadline = std::chrono::steady_clock::now() + request_timeout;

  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  absl::Status result = absl::UnknownError("etcd call did not finish");
  bool done = false;
  bool connect_failed = false;

  // The exchange runs as one coroutine on this thread's private io_context; the
  // loop below drives it in short slices so Cancel() from another thread is seen.
  auto exchange = [&]() -> asio::awaitable<absl::Status> {
    beast::error_code ec;
    auto redirect = asio::redirect_error(asio::use_awaitable, ec);
    auto results = co_await resolver.async_resolve(endpoint.host, endpoint.port, redirect);
    if (ec) {
      connect_failed = true;
      co_return IoError("resolve", endpoint_name, ec);
    }
    stream.expires_at(deadline);
    co_await stream.async_connect(results, redirect);
    if (ec) {
      connect_failed = true;
      co_return IoError("connect", endpoint_name, ec);
    }
    http::request<http::string_body> request{http::verb::post, std::string(path), 11};
    request.set(http::field::host, endpoint_name);
    request.set(http::field::content_type, "application/json");
    request.body() = body;
    request.prepare_payload();
    co_await http::async_write(stream, request, redirect);
    if (ec) co_return IoError("write", endpoint_name, ec);

    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    if (streaming) {
      parser.body_limit(boost::none);
      stream.expires_after(idle_timeout);
    } else {
      parser.body_limit(options_.max_response_bytes);
    }
    co_await http::async_read_header(stream, buffer, parser, redirect);
    if (ec) co_return IoError("read header", endpoint_name, ec);
    const int http_status = parser.get().result_int();
    std::string error_body;
    char chunk[16 * 1024];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      if (streaming) stream.expires_after(idle_timeout);
      co_await http::async_read_some(stream, buffer, parser, redirect);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return IoError("read body", endpoint_name, ec);
      size_t n = sizeof(chunk) - parser.get().body().size;
      if (n == 0) continue;
      if (http_status != 200) {
        if (error_body.size() < kMaxErrorBodyBytes) error_body.append(chunk, n);
        continue;
      }
      if (auto s = on_data(std::string_view(chunk, n)); !s.ok()) co_return s;
    }
    if (http_status != 200) co_return GatewayError(http_status, error_body);
    if (streaming) co_return absl::UnavailableError(Cat("etcd ", endpoint_name, ": stream ended"));
    co_return absl::OkStatus();
  };

  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        result = co_await exchange();
        done = true;
      },
      asio::detached);
  bool cancel_sent = false;
  while (!done) {
    ioc.run_for(std::chrono::milliseconds(kCancelPollMs));
    if (!done && !cancel_sent && cancelled()) {
      cancel_sent = true;
      resolver.cancel();
      beast::error_code ignored;
      stream.socket().cancel(ignored);
      stream.socket().close(ignored);
    }
    if (ioc.stopped() && !done) ioc.restart();
  }
  if (cancel_sent || (!result.ok() && cancelled())) {
    return absl::CancelledError("etcd client cancelled");
  }
  if (connect_failed && endpoints_.size() > 1) endpoint_index_.fetch_add(1);
  return result;
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
