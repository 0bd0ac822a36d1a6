#include "http/client.h"

#include <array>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/cord.h"
#include "http/lazy_timer.h"

namespace infera::http {
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using asio::use_awaitable;

namespace {

// absl's own string_view (Debian's absl is not built on std::string_view).
constexpr absl::string_view kLocalErrorPayload = "infera.http/local-error";

// Interim (1xx) responses skipped before the final one; more is a malformed answer.
constexpr int kMaxInterimResponses = 8;

// At most this many body bytes per ClientStream::Read().
constexpr size_t kMaxPieceBytes = 64u << 10;

// The errno name of a failure of this process's own resources, or "".
std::string_view LocalKind(const beast::error_code& ec) {
  if (ec.category() != boost::system::system_category() &&
      ec.category() != boost::system::generic_category()) {
    return "";
  }
  switch (ec.value()) {
    case EMFILE:
      return "emfile";
    case ENFILE:
      return "enfile";
    case ENOBUFS:
      return "enobufs";
    case ENOMEM:
      return "enomem";
    default:
      return "";
  }
}

// Unavailable, or ResourceExhausted when the failure was local.
absl::Status ConnectError(const beast::error_code& ec, std::string what) {
  if (std::string_view kind = LocalKind(ec); !kind.empty()) {
    return LocalResourceError(kind, what + ": out of local resources: " + ec.message());
  }
  return absl::UnavailableError(what + ": " + ec.message());
}

absl::Status MapError(const beast::error_code& ec, std::string_view what, bool cancelled) {
  if (cancelled) return absl::CancelledError(std::string(what) + ": cancelled");
  if (!LocalKind(ec).empty()) return ConnectError(ec, std::string(what));
  if (ec == beast::error::timeout) {
    return absl::DeadlineExceededError(std::string(what) + ": deadline exceeded");
  }
  bool http_error = ec.category() == beast::error_code(bhttp::error::bad_version).category();
  if (http_error && ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return absl::DataLossError(std::string(what) + ": malformed response: " + ec.message());
  }
  return absl::UnavailableError(std::string(what) + ": " + ec.message());
}

// Beast's async_read_header without its composed operations (read_op over
// read_some_op, each with a work guard and executor copies per suspension, ~2k
// instructions per response; doc/perf-router.md): buffered bytes are parsed in place,
// then plain socket reads, with Beast's errors (end_of_stream when the peer closed
// before any byte, partial_message when it closed mid-head, buffer_overflow).
Awaitable<void> ReadResponseHead(tcp::socket& socket, beast::flat_buffer& buffer,
                                 bhttp::response_parser<bhttp::buffer_body>& parser,
                                 beast::error_code& ec) {
  ec = {};
  while (!parser.is_header_done()) {
    if (buffer.size() > 0) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec && ec != bhttp::error::need_more) co_return;
      ec = {};
      if (parser.is_header_done()) break;
      if (used > 0) continue;
      if (buffer.size() >= buffer.max_size()) {
        ec = bhttp::error::buffer_overflow;
        co_return;
      }
    }
    const size_t n =
        co_await socket.async_read_some(buffer.prepare(beast::read_size(buffer, 65536)), NoThrow(ec));
    if (ec == asio::error::eof) {
      if (parser.got_some()) {
        ec = {};
        parser.put_eof(ec);
        if (!ec && !parser.is_header_done()) ec = bhttp::error::partial_message;
      } else {
        ec = bhttp::error::end_of_stream;
      }
      co_return;
    }
    if (ec) co_return;
    buffer.commit(n);
  }
}

}  // namespace

std::string LocalErrorKind(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kResourceExhausted) return "";
  auto kind = status.GetPayload(kLocalErrorPayload);
  return kind ? std::string(*kind) : std::string();
}

absl::Status LocalResourceError(std::string_view kind, std::string message) {
  absl::Status s = absl::ResourceExhaustedError(std::move(message));
  s.SetPayload(kLocalErrorPayload, absl::Cord(absl::string_view(kind.data(), kind.size())));
  return s;
}

// An upstream connection: a plain socket and one deadline (LazyTimer; Beast's
// tcp_stream armed and cancelled a timer around every operation). Past the deadline
// the socket is closed and `timed_out` set: the operation under way fails, reported
// as beast::error::timeout (TimedOut()).
struct Client::Conn {
  explicit Conn(const asio::any_io_executor& ex)
      : socket(ex), deadline(ex, [this] {
          timed_out = true;
          beast::error_code ec;
          socket.close(ec);
        }) {}
  // The deadline of the operations from now on; Clear() after them.
  void Expires(Deadline at, const std::shared_ptr<Conn>& self) { deadline.Set(at, self); }
  // `ec`, or timeout when the deadline closed the socket under the operation.
  beast::error_code TimedOut(const beast::error_code& ec) const {
    return ec && timed_out ? beast::error_code(beast::error::timeout) : ec;
  }
  void Close() {
    deadline.Stop();
    beast::error_code ec;
    socket.close(ec);
  }

  tcp::socket socket;
  LazyTimer deadline;
  bool timed_out = false;
};

struct Client::Pool {
  std::unordered_map<std::string, std::vector<std::shared_ptr<Conn>>> idle;
  size_t max_idle_per_host = 0;
};

struct ClientStream::Impl {
  Impl(std::shared_ptr<Client::Conn> c, std::shared_ptr<Client::Pool> p, std::string k)
      : conn(std::move(c)), pool(std::move(p)), key(std::move(k)) {}

  std::shared_ptr<Client::Conn> conn;
  std::shared_ptr<Client::Pool> pool;
  std::string key;
  beast::flat_buffer buffer;
  // Re-created for each interim (1xx) response before the final one.
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
  Headers headers;
  int status = 0;
  Deadline deadline;
  uint64_t body_limit = 0;
  uint64_t body_bytes = 0;
  bool cancelled = false;
  bool broken = false;
  absl::Status error;  // why it broke, when Read() returned bytes first
  bool done = false;
  // Body pieces are read into this buffer, then copied out; 8 KiB keeps the whole
  // Impl a small allocation for mimalloc.
  char chunk[8192];
};

ClientStream::ClientStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClientStream::~ClientStream() {
  if (cancellation_) cancellation_->Unbind();
  Impl& s = *impl_;
  bool reusable = s.done && !s.broken && !s.cancelled && s.parser->get().keep_alive() &&
                  s.buffer.size() == 0 && s.conn->socket.is_open();
  if (reusable) {
    auto& idle = s.pool->idle[s.key];
    if (idle.size() < s.pool->max_idle_per_host) {
      s.conn->deadline.Clear();
      idle.push_back(std::move(s.conn));
      return;
    }
  }
  s.conn->Close();
}

int ClientStream::status() const { return impl_->status; }
const Headers& ClientStream::headers() const { return impl_->headers; }
bool ClientStream::cancelled() const { return impl_->cancelled; }

void ClientStream::Cancel() {
  if (impl_->cancelled) return;
  impl_->cancelled = true;
  beast::error_code ec;
  impl_->conn->socket.shutdown(tcp::socket::shutdown_both, ec);
  impl_->conn->Close();
}

Awaitable<absl::StatusOr<std::optional<std::string>>> ClientStream::Read() {
  Impl& s = *impl_;
  // What this call returns: every body byte parsable without waiting, up to
  // kMaxPieceBytes (one socket read buffers up to 64 KiB; handing it over 8 KiB at a
  // time cost a relay one round trip per 8 KiB).
  std::string out;
  auto fail = [&](absl::Status error) -> absl::StatusOr<std::optional<std::string>> {
    s.broken = true;
    if (out.empty()) return error;
    s.error = std::move(error);  // the bytes before it first; the error next time
    return std::optional<std::string>(std::move(out));
  };
  while (true) {
    if (s.cancelled) co_return absl::CancelledError("upstream read: cancelled");
    if (s.done) {
      if (out.empty()) co_return std::optional<std::string>();
      co_return std::optional<std::string>(std::move(out));
    }
    if (s.broken) {
      co_return s.error.ok() ? absl::UnavailableError("upstream read: connection broken") : s.error;
    }
    s.parser->get().body().data = s.chunk;
    s.parser->get().body().size = sizeof(s.chunk);
    beast::error_code ec;
    size_t used = 0;
    if (s.buffer.size() > 0) {
      // Bytes that came with the header (or an earlier read): parse them in place.
      used = s.parser->put(s.buffer.data(), ec);
      s.buffer.consume(used);
      if (ec == bhttp::error::need_more) ec = {};
    }
    if (!ec && used == 0 && !s.parser->is_done()) {
      if (!out.empty()) co_return std::optional<std::string>(std::move(out));  // no waiting
      s.conn->Expires(s.deadline, s.conn);
      co_await bhttp::async_read_some(s.conn->socket, s.buffer, *s.parser, NoThrow(ec));
      s.conn->deadline.Clear();
      ec = s.conn->TimedOut(ec);
    }
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) co_return fail(MapError(ec, "upstream read", s.cancelled));
    size_t n = sizeof(s.chunk) - s.parser->get().body().size;
    if (s.parser->is_done()) s.done = true;
    s.body_bytes += n;
    if (s.body_bytes > s.body_limit) {
      co_return fail(absl::ResourceExhaustedError("upstream response body exceeds the limit"));
    }
    out.append(s.chunk, n);
    if (out.size() >= kMaxPieceBytes) co_return std::optional<std::string>(std::move(out));
  }
}

Awaitable<absl::StatusOr<std::string>> ClientStream::ReadAll(uint64_t max_bytes) {
  std::string out;
  while (true) {
    auto piece = co_await Read();
    if (!piece.ok()) co_return piece.status();
    if (!piece->has_value()) co_return out;
    out += **piece;
    if (out.size() > max_bytes) {
      co_return absl::ResourceExhaustedError("response body exceeds " + std::to_string(max_bytes) +
                                             " bytes");
    }
  }
}

Client::Client(asio::any_io_executor executor, ClientOptions options)
    : executor_(std::move(executor)), options_(options), pool_(std::make_shared<Pool>()) {
  pool_->max_idle_per_host = options_.max_idle_per_host;
}

Client::~Client() {
  // The idle connections' deadline waits hold them: stopped, they go now.
  for (auto& [key, conns] : pool_->idle) {
    for (auto& c : conns) c->Close();
  }
  pool_->idle.clear();
}

size_t Client::idle_connections() const {
  size_t n = 0;
  for (const auto& [k, v] : pool_->idle) n += v.size();
  return n;
}

Awaitable<absl::StatusOr<std::unique_ptr<ClientStream>>> Client::Send(
    Endpoint endpoint, std::string method, std::string target, Headers headers, std::string body,
    Deadline deadline, std::shared_ptr<Cancellation> cancel) {
  if (cancel && cancel->cancelled()) co_return absl::CancelledError("request cancelled");
  const std::string key = endpoint.HostPort();
  // The request head, serialized by hand (Beast's serializer cost ~12k instructions
  // per request here); written together with the body in one gather write.
  std::string head;
  head.reserve(128 + endpoint.base_path.size() + target.size() + 64 * headers.fields().size());
  head.append(method).append(" ").append(endpoint.base_path).append(target).append(" HTTP/1.1\r\n");
  head.append("Host: ").append(key).append("\r\n");
  headers.AppendWireExcept(head, {"Host", "Content-Length", "Transfer-Encoding", "Connection"});
  if (!body.empty() || (method != "GET" && method != "HEAD" && method != "DELETE")) {
    head.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  head.append("\r\n");
  const std::array<asio::const_buffer, 2> request_bytes = {asio::buffer(head), asio::buffer(body)};

  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Conn> conn;
    bool reused = false;
    auto it = pool_->idle.find(key);
    if (attempt == 0 && it != pool_->idle.end() && !it->second.empty()) {
      conn = std::move(it->second.back());
      it->second.pop_back();
      reused = true;
    } else {
      conn = std::make_shared<Conn>(executor_);
      tcp::resolver resolver(executor_);
      beast::error_code ec;
      auto results = co_await resolver.async_resolve(endpoint.host, std::to_string(endpoint.port),
                                                     NoThrow(ec));
      if (ec) co_return ConnectError(ec, "resolve " + key);
      auto connect_deadline =
          std::min(deadline, std::chrono::steady_clock::now() +
                                 std::chrono::milliseconds(options_.connect_timeout_ms));
      conn->Expires(connect_deadline, conn);
      if (cancel) {
        cancel->Bind([&conn] {
          beast::error_code cec;
          conn->socket.cancel(cec);
        });
      }
      // Each address in turn, the socket opened here: Asio's range connect reports a
      // socket it could not open (EMFILE) as operation_aborted, hiding a local failure.
      ec = asio::error::host_not_found;
      for (const auto& entry : results) {
        conn->socket.open(entry.endpoint().protocol(), ec);
        if (ec) break;  // local: another address would fail the same way
        co_await conn->socket.async_connect(entry.endpoint(), NoThrow(ec));
        ec = conn->TimedOut(ec);
        if (!ec || ec == beast::error::timeout || (cancel && cancel->cancelled())) break;
        beast::error_code cec;
        conn->socket.close(cec);
      }
      if (!ec && !(cancel && cancel->cancelled())) {
        conn->deadline.Clear();
      } else {
        conn->Close();  // its deadline wait holds it: stopped, it goes now
      }
      if (cancel) cancel->Unbind();
      if (cancel && cancel->cancelled()) co_return absl::CancelledError("request cancelled");
      if (ec) {
        if (ec == beast::error::timeout && connect_deadline == deadline) {
          co_return absl::DeadlineExceededError("connect " + key + ": deadline exceeded");
        }
        co_return ConnectError(ec, "connect " + key);
      }
      beast::error_code nec;
      conn->socket.set_option(tcp::no_delay(true), nec);
    }
    auto impl = std::make_unique<ClientStream::Impl>(std::move(conn), pool_, key);
    impl->deadline = deadline;
    impl->body_limit = options_.max_response_body_bytes;
    auto new_parser = [&] {
      impl->parser.emplace();
      impl->parser->header_limit(options_.max_response_header_bytes);
      impl->parser->body_limit(options_.max_response_body_bytes);
      if (method == "HEAD") impl->parser->skip(true);
    };
    new_parser();

    Conn& c = *impl->conn;
    c.Expires(deadline, impl->conn);
    if (cancel) {
      cancel->Bind([&c] {
        beast::error_code cec;
        c.socket.cancel(cec);
      });
    }
    beast::error_code ec;
    co_await asio::async_write(c.socket, request_bytes, NoThrow(ec));
    // Interim responses (100 Continue, 102, 103) precede the final one and carry no
    // body (RFC 9110 §15.2): skipped, at most kMaxInterimResponses of them. A 101 is
    // final: this client never asks to switch protocols, so it is malformed here.
    for (int interim = 0; !ec; ++interim) {
      co_await ReadResponseHead(c.socket, impl->buffer, *impl->parser, ec);
      const unsigned code = ec ? 0 : impl->parser->get().result_int();
      if (code < 100 || code > 199) break;
      if (code == 101 || interim + 1 >= kMaxInterimResponses) {
        c.Close();
        if (cancel) cancel->Unbind();
        co_return absl::DataLossError(
            method + " " + key + target + ": malformed response: " +
            (code == 101 ? std::string("101 Switching Protocols without an upgrade request")
                         : "more than " + std::to_string(kMaxInterimResponses) +
                               " interim (1xx) responses"));
      }
      new_parser();
    }
    c.deadline.Clear();
    ec = c.TimedOut(ec);
    if (cancel) cancel->Unbind();
    if (cancel && cancel->cancelled()) {
      c.Close();
      co_return absl::CancelledError("request cancelled");
    }
    if (ec) {
      c.Close();
      bool stale = reused && ec != beast::error::timeout && impl->buffer.size() == 0;
      if (stale) continue;
      co_return MapError(ec, method + " " + key + target, false);
    }
    auto& msg = impl->parser->get();
    impl->status = static_cast<int>(msg.result_int());
    impl->headers.Reserve(16);
    for (const auto& f : msg) {
      impl->headers.Add(std::string(f.name_string()), std::string(f.value()));
    }
    if (impl->parser->is_done()) impl->done = true;
    auto out = std::make_unique<ClientStream>(std::move(impl));
    if (cancel) cancel->Bind([s = out.get()] { s->Cancel(); });
    out->cancellation_ = cancel;
    co_return out;
  }
  co_return absl::UnavailableError("upstream " + key + " closed the connection");
}

Awaitable<absl::StatusOr<ClientResponse>> Client::Fetch(Endpoint endpoint, std::string method,
                                                        std::string target, Headers headers,
                                                        std::string body, Deadline deadline) {
  auto stream = co_await Send(std::move(endpoint), std::move(method), std::move(target),
                              std::move(headers), std::move(body), deadline);
  if (!stream.ok()) co_return stream.status();
  auto all = co_await (*stream)->ReadAll(options_.max_response_body_bytes);
  if (!all.ok()) co_return all.status();
  ClientResponse res;
  res.status = (*stream)->status();
  res.headers = (*stream)->headers();
  res.body = std::move(*all);
  co_return res;
}

}  // namespace infera::http
