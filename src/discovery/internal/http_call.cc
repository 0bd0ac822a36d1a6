#include "discovery/internal/http_call.h"

#include <openssl/ssl.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <optional>

#include "discovery/internal/str_cat.h"

namespace infera::discovery::internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using asio::ip::tcp;

constexpr size_t kMaxErrorBodyBytes = 64 * 1024;

absl::Status IoError(const HttpCallOptions& o, const HttpEndpoint& ep, std::string_view step,
                     const beast::error_code& ec) {
  std::string what = Cat(o.service, " ", ep.Name(), ": ", step, ": ", ec.message());
  if (ec == beast::error::timeout) return absl::DeadlineExceededError(what);
  return absl::UnavailableError(what);
}

// The exchange over an established stream (a tcp_stream, or a TLS stream on one).
template <class Stream>
asio::awaitable<absl::Status> Exchange(Stream& stream, const HttpEndpoint& ep,
                                       const HttpCallOptions& o,
                                       const std::function<absl::Status(std::string_view)>& on_data,
                                       HttpCallResult& result) {
  beast::error_code ec;
  auto redirect = asio::redirect_error(asio::use_awaitable, ec);
  auto& lowest = beast::get_lowest_layer(stream);
  http::request<http::string_body> request{http::string_to_verb(o.method), o.target, 11};
  request.set(http::field::host, ep.Name());
  for (const auto& [name, value] : o.headers) request.set(name, value);
  if (!o.content_type.empty()) request.set(http::field::content_type, o.content_type);
  request.body() = o.body;
  request.prepare_payload();
  co_await http::async_write(stream, request, redirect);
  if (ec) co_return IoError(o, ep, "write", ec);

  const auto idle_timeout = std::chrono::milliseconds(o.idle_timeout_ms);
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  if (o.streaming) {
    parser.body_limit(boost::none);
    lowest.expires_after(idle_timeout);
  } else {
    parser.body_limit(o.max_response_bytes);
  }
  co_await http::async_read_header(stream, buffer, parser, redirect);
  if (ec) co_return IoError(o, ep, "read header", ec);
  result.status = parser.get().result_int();
  const bool ok_status = result.status >= 200 && result.status < 300;
  char chunk[16 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    if (o.streaming) lowest.expires_after(idle_timeout);
    co_await http::async_read_some(stream, buffer, parser, redirect);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return IoError(o, ep, "read body", ec);
    const size_t n = sizeof(chunk) - parser.get().body().size;
    if (n == 0) continue;
    if (!ok_status) {
      if (result.error_body.size() < kMaxErrorBodyBytes) result.error_body.append(chunk, n);
      continue;
    }
    if (absl::Status s = on_data(std::string_view(chunk, n)); !s.ok()) co_return s;
  }
  result.body_complete = true;
  co_return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HttpCallResult> HttpCall(
    const HttpEndpoint& ep, const HttpCallOptions& o, const std::atomic<bool>& cancelled,
    const std::function<absl::Status(std::string_view)>& on_data, bool* connect_failed) {
  if (connect_failed != nullptr) *connect_failed = false;
  if (cancelled.load()) return absl::CancelledError(Cat(o.service, " client cancelled"));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(o.request_timeout_ms);

  asio::io_context ioc;
  std::optional<ssl::context> tls;
  if (ep.tls) {
    tls.emplace(ssl::context::tls_client);
    beast::error_code ec;
    if (ep.ca_file.empty()) {
      tls->set_default_verify_paths(ec);
    } else {
      tls->load_verify_file(ep.ca_file, ec);
    }
    if (ec) {
      return absl::FailedPreconditionError(
          Cat(o.service, ": cannot load the CA bundle '", ep.ca_file, "': ", ec.message()));
    }
    tls->set_verify_mode(ssl::verify_peer);
  }
  tcp::resolver resolver(ioc);
  beast::tcp_stream plain(ioc);
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  if (tls) secure.emplace(ioc, *tls);
  beast::tcp_stream& lowest = secure ? beast::get_lowest_layer(*secure) : plain;

  HttpCallResult result;
  absl::Status status = absl::UnknownError(Cat(o.service, " call did not finish"));
  bool done = false;
  bool no_connection = false;
  auto exchange = [&]() -> asio::awaitable<absl::Status> {
    beast::error_code ec;
    auto redirect = asio::redirect_error(asio::use_awaitable, ec);
    auto results = co_await resolver.async_resolve(ep.host, ep.port, redirect);
    if (ec) {
      no_connection = true;
      co_return IoError(o, ep, "resolve", ec);
    }
    lowest.expires_at(deadline);
    co_await lowest.async_connect(results, redirect);
    if (ec) {
      no_connection = true;
      co_return IoError(o, ep, "connect", ec);
    }
    if (!secure) co_return co_await Exchange(plain, ep, o, on_data, result);
    // SNI and host-name verification (RFC 6125), as any TLS client does.
    if (!SSL_set_tlsext_host_name(secure->native_handle(), ep.host.c_str())) {
      co_return absl::UnavailableError(Cat(o.service, " ", ep.Name(), ": cannot set SNI"));
    }
    secure->set_verify_callback(ssl::host_name_verification(ep.host));
    co_await secure->async_handshake(ssl::stream_base::client, redirect);
    if (ec) co_return IoError(o, ep, "TLS handshake", ec);
    co_return co_await Exchange(*secure, ep, o, on_data, result);
  };
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        status = co_await exchange();
        done = true;
      },
      asio::detached);
  bool cancel_sent = false;
  while (!done) {
    ioc.run_for(std::chrono::milliseconds(kCancelPollMs));
    if (!done && !cancel_sent && cancelled.load()) {
      cancel_sent = true;
      resolver.cancel();
      beast::error_code ignored;
      lowest.socket().cancel(ignored);
      lowest.socket().close(ignored);
    }
    if (ioc.stopped() && !done) ioc.restart();
  }
  if (connect_failed != nullptr) *connect_failed = no_connection;
  if (cancel_sent || (!status.ok() && cancelled.load())) {
    return absl::CancelledError(Cat(o.service, " client cancelled"));
  }
  if (!status.ok()) return status;
  return result;
}

}  // namespace infera::discovery::internal
