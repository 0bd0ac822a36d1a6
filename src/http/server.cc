#include "http/server.h"

#include <array>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "spdlog/spdlog.h"

namespace infera::http {
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using asio::use_awaitable;

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 &&
               HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

auto NoThrow(beast::error_code& ec) { return asio::redirect_error(use_awaitable, ec); }

}  // namespace

std::string_view Request::path() const {
  std::string_view t = target;
  size_t q = t.find('?');
  return q == std::string_view::npos ? t : t.substr(0, q);
}

std::string Request::QueryParam(std::string_view name) const {
  std::string_view t = target;
  size_t q = t.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view query = t.substr(q + 1);
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    std::string key = PercentDecode(pair.substr(0, eq));
    if (key == name) {
      return eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return {};
}

ErrorBody DefaultErrorBody(int status, std::string_view message, std::string_view /*target*/) {
  nlohmann::json j = {{"error",
                       {{"message", message},
                        {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                        {"code", status}}}};
  return {"application/json", j.dump()};
}

// Connections registered per loop, touched only on that loop's thread.
struct Server::LoopConnections {
  std::unordered_set<Connection*> all;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server& server, int loop, tcp::socket socket)
      : server_(server), loop_(loop), stream_(std::move(socket)) {}

  Awaitable<void> Run();
  // Closes the connection if it is between requests (shutdown).
  void CloseIfIdle() {
    if (idle_) {
      beast::error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      stream_.socket().close(ec);
    }
  }

 private:
  friend class ResponseWriter;
  Awaitable<bool> WriteSimple(bhttp::response<bhttp::string_body>& res);
  Awaitable<void> SendError(int status, std::string_view message, std::string_view target,
                            bool keep_alive);
  struct WatchState {
    ResponseWriter* writer = nullptr;
  };
  void Watch(std::shared_ptr<WatchState> state);
  void ArmWrite() {
    stream_.expires_after(std::chrono::milliseconds(server_.options_.write_timeout_ms));
  }

  Server& server_;
  int loop_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  bool idle_ = true;
  bool keep_alive_ = true;
  // The disconnect watch of the request being handled (one read on the socket, no
  // coroutine). `writer` is cleared when the handler returns.
  std::shared_ptr<WatchState> watch_;
  std::string peer_;  // "address:port", read once per connection
  std::unique_ptr<bhttp::response<bhttp::empty_body>> stream_head_;
  std::unique_ptr<bhttp::response_serializer<bhttp::empty_body>> stream_serializer_;
};

Awaitable<bool> Connection::WriteSimple(bhttp::response<bhttp::string_body>& res) {
  ArmWrite();
  beast::error_code ec;
  co_await bhttp::async_write(stream_, res, NoThrow(ec));
  co_return !ec;
}

Awaitable<void> Connection::SendError(int status, std::string_view message, std::string_view target,
                                      bool keep_alive) {
  ErrorBody eb = server_.options_.error_body(status, message, target);
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, eb.content_type);
  res.body() = std::move(eb.body);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  co_await WriteSimple(res);
}

// Watches for the peer to close while the handler runs: one read on the socket (a
// speculative recv, then the reactor). Bytes that arrive (a pipelined request) go
// into the read buffer for Run(); an error other than cancellation means the
// client is gone. Run() cancels the read when the handler returns and lets the
// completion run before it touches the buffer again.
void Connection::Watch(std::shared_ptr<WatchState> state) {
  stream_.socket().async_read_some(
      buffer_.prepare(4096),
      [self = shared_from_this(), state = std::move(state)](const beast::error_code& ec, size_t n) {
        if (!ec) {
          self->buffer_.commit(n);
        } else if (ec != asio::error::operation_aborted && state->writer != nullptr) {
          state->writer->MarkClientGone();
        }
      });
}

Awaitable<void> Connection::Run() {
  auto self = shared_from_this();
  const ServerOptions& opt = server_.options_;
  while (!server_.stopping_.load()) {
    idle_ = true;
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(opt.max_header_bytes);
    parser.body_limit(opt.max_body_bytes);
    stream_.expires_after(std::chrono::milliseconds(opt.idle_timeout_ms));
    beast::error_code ec;
    co_await bhttp::async_read_header(stream_, buffer_, parser, NoThrow(ec));
    idle_ = false;
    if (ec) {
      if (ec == bhttp::error::header_limit) {
        co_await SendError(431, "request headers exceed the limit", "", false);
      } else if (ec == bhttp::error::body_limit) {
        // The parser checks Content-Length against the limit with the header.
        co_await SendError(
            413,
            "request body exceeds the limit of " + std::to_string(opt.max_body_bytes) + " bytes",
            std::string(parser.get().target()), false);
      } else if (ec != bhttp::error::end_of_stream && ec != beast::error::timeout &&
                 ec != asio::error::eof && ec != asio::error::operation_aborted &&
                 ec != asio::error::connection_reset && ec != asio::error::bad_descriptor &&
                 buffer_.size() > 0) {
        co_await SendError(400, "malformed HTTP request: " + ec.message(), "", false);
      }
      break;
    }
    std::string target(parser.get().target());
    auto content_length = parser.content_length();
    if (content_length && *content_length > opt.max_body_bytes) {
      co_await SendError(413,
                         "request body of " + std::to_string(*content_length) +
                             " bytes exceeds the limit of " + std::to_string(opt.max_body_bytes),
                         target, false);
      break;
    }
    if (beast::iequals(parser.get()[bhttp::field::expect], "100-continue")) {
      bhttp::response<bhttp::empty_body> cont{bhttp::status::continue_, 11};
      ArmWrite();
      beast::error_code wec;
      co_await bhttp::async_write(stream_, cont, NoThrow(wec));
      if (wec) break;
    }
    stream_.expires_after(std::chrono::milliseconds(opt.request_timeout_ms));
    beast::error_code rec;
    // The body usually arrived with the header: parse what is buffered in place and
    // read from the socket only if more is needed.
    while (!parser.is_done() && buffer_.size() > 0) {
      size_t used = parser.put(buffer_.data(), rec);
      buffer_.consume(used);
      if (rec == bhttp::error::need_more) rec = {};
      if (rec || used == 0) break;
    }
    if (!rec && !parser.is_done()) {
      co_await bhttp::async_read(stream_, buffer_, parser, NoThrow(rec));
    }
    if (rec) {
      if (rec == bhttp::error::body_limit) {
        co_await SendError(
            413,
            "request body exceeds the limit of " + std::to_string(opt.max_body_bytes) + " bytes",
            target, false);
      } else if (rec == beast::error::timeout) {
        co_await SendError(408, "request not received in time", target, false);
      } else if (rec != asio::error::eof && rec != bhttp::error::end_of_stream &&
                 rec != asio::error::connection_reset) {
        co_await SendError(400, "malformed HTTP request: " + rec.message(), target, false);
      }
      break;
    }
    auto& msg = parser.get();
    keep_alive_ = msg.keep_alive();
    Request req;
    req.method = std::string(msg.method_string());
    req.target = std::move(target);
    req.headers.Reserve(16);
    for (const auto& f : msg) {
      req.headers.Add(std::string(f.name_string()), std::string(f.value()));
    }
    req.body = std::move(msg.body());
    if (peer_.empty()) {
      beast::error_code rep_ec;
      auto ep = stream_.socket().remote_endpoint(rep_ec);
      if (!rep_ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    }
    req.remote_address = peer_;

    ResponseWriter writer(this);
    // Watch for a disconnect only when no pipelined bytes are already buffered.
    if (buffer_.size() == 0) {
      watch_ = std::make_shared<WatchState>();
      watch_->writer = &writer;
      Watch(watch_);
    }
    std::exception_ptr error;
    try {
      co_await server_.handler_(req, writer);
    } catch (...) {
      error = std::current_exception();
    }
    if (watch_) {
      // Detach the watch from `writer` (which dies with this iteration), cancel its
      // read, and yield once: the read's completion is queued before this post, so
      // it has run (and committed any pipelined bytes) when we resume.
      watch_->writer = nullptr;
      watch_.reset();
      beast::error_code cec;
      stream_.socket().cancel(cec);
      co_await asio::post(stream_.get_executor(), use_awaitable);
    }
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        spdlog::error("http: handler for {} threw: {}", req.target, e.what());
      } catch (...) {
        spdlog::error("http: handler for {} threw", req.target);
      }
    }
    if (!writer.started() && !writer.client_gone()) {
      co_await SendError(500, "the handler produced no response", req.target, false);
      break;
    }
    if (!writer.finished() || writer.failed() || writer.client_gone() || !keep_alive_) break;
  }
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.socket().close(ec);
}

void ResponseWriter::MarkClientGone() {
  if (client_gone_) return;
  client_gone_ = true;
  if (on_gone_) {
    auto fn = std::move(on_gone_);
    fn();
  }
}

Awaitable<bool> ResponseWriter::Send(int status, Headers headers, std::string body) {
  started_ = true;
  // Serialized by hand into one head buffer (status line, fields, Content-Length)
  // written together with the body: Beast's serializer cost ~12k instructions per
  // response here (doc/perf-router.md).
  std::string head;
  head.reserve(128 + 64 * headers.fields().size());
  head.append("HTTP/1.1 ").append(std::to_string(status)).push_back(' ');
  auto beast_reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  std::string_view reason(beast_reason.data(), beast_reason.size());
  head.append(reason.empty() ? std::string_view("Unknown") : reason).append("\r\n");
  headers.Remove("Content-Length");
  headers.Remove("Transfer-Encoding");
  headers.Remove("Connection");
  headers.AppendWire(head);
  bool keep = conn_->keep_alive_ && !conn_->server_.stopping();
  if (!keep) head.append("Connection: close\r\n");
  head.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n\r\n");
  conn_->ArmWrite();
  beast::error_code ec;
  std::array<asio::const_buffer, 2> buffers = {asio::buffer(head), asio::buffer(body)};
  co_await asio::async_write(conn_->stream_, buffers, NoThrow(ec));
  bool ok = !ec;
  if (!keep) conn_->keep_alive_ = false;
  finished_ = true;
  if (!ok) {
    failed_ = true;
    MarkClientGone();
  }
  co_return ok;
}

Awaitable<bool> ResponseWriter::BeginStream(int status, Headers headers) {
  started_ = true;
  auto& head = conn_->stream_head_;
  head =
      std::make_unique<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(status), 11);
  for (const auto& f : headers.fields()) head->insert(f.name, f.value);
  head->keep_alive(conn_->keep_alive_ && !conn_->server_.stopping());
  head->chunked(true);
  conn_->stream_serializer_ =
      std::make_unique<bhttp::response_serializer<bhttp::empty_body>>(*head);
  conn_->ArmWrite();
  beast::error_code ec;
  co_await bhttp::async_write_header(conn_->stream_, *conn_->stream_serializer_, NoThrow(ec));
  if (ec) {
    failed_ = true;
    MarkClientGone();
    co_return false;
  }
  co_return true;
}

Awaitable<bool> ResponseWriter::WriteChunk(std::string_view data) {
  if (failed_) co_return false;
  if (data.empty()) co_return true;
  conn_->ArmWrite();
  beast::error_code ec;
  co_await asio::async_write(
      conn_->stream_, bhttp::make_chunk(asio::const_buffer(data.data(), data.size())), NoThrow(ec));
  if (ec) {
    failed_ = true;
    MarkClientGone();
    co_return false;
  }
  co_return true;
}

Awaitable<bool> ResponseWriter::EndStream() {
  if (failed_) co_return false;
  conn_->ArmWrite();
  beast::error_code ec;
  co_await asio::async_write(conn_->stream_, bhttp::make_chunk_last(), NoThrow(ec));
  finished_ = true;
  if (ec) {
    failed_ = true;
    MarkClientGone();
    co_return false;
  }
  co_return true;
}

Server::Server(IoPool& pool, ServerOptions options, Handler handler)
    : pool_(pool), options_(std::move(options)), handler_(std::move(handler)) {
  for (int i = 0; i < pool_.size(); ++i) loops_.push_back(std::make_unique<LoopConnections>());
}

Server::~Server() = default;

absl::Status Server::Listen() {
  try {
    auto addr = asio::ip::make_address(options_.host);
    tcp::endpoint ep(addr, options_.port);
    acceptor_ = std::make_unique<tcp::acceptor>(pool_.context(0));
    acceptor_->open(ep.protocol());
    acceptor_->set_option(asio::socket_base::reuse_address(true));
    acceptor_->bind(ep);
    acceptor_->listen(asio::socket_base::max_listen_connections);
    port_ = acceptor_->local_endpoint().port();
  } catch (const std::exception& e) {
    return absl::UnavailableError("cannot listen on " + options_.host + ":" +
                                  std::to_string(options_.port) + ": " + e.what());
  }
  return absl::OkStatus();
}

void Server::Start() { asio::co_spawn(pool_.context(0), AcceptLoop(), asio::detached); }

Awaitable<void> Server::AcceptLoop() {
  while (!stopping_.load()) {
    int loop = pool_.NextIndex();
    beast::error_code ec;
    auto socket = co_await acceptor_->async_accept(pool_.context(loop), NoThrow(ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || stopping_.load()) break;
      spdlog::warn("http: accept failed: {}", ec.message());
      asio::steady_timer t(acceptor_->get_executor(), std::chrono::milliseconds(10));
      beast::error_code tec;
      co_await t.async_wait(NoThrow(tec));
      continue;
    }
    beast::error_code nec;
    socket.set_option(tcp::no_delay(true), nec);
    open_connections_.fetch_add(1);
    auto conn = std::make_shared<Connection>(*this, loop, std::move(socket));
    LoopConnections* lc = loops_[static_cast<size_t>(loop)].get();
    asio::co_spawn(
        pool_.context(loop),
        [this, conn, lc]() -> Awaitable<void> {
          lc->all.insert(conn.get());
          co_await conn->Run();
          lc->all.erase(conn.get());
          open_connections_.fetch_sub(1);
        },
        asio::detached);
  }
}

void Server::Shutdown() {
  if (stopping_.exchange(true)) return;
  if (acceptor_) {
    std::promise<void> closed;
    asio::post(acceptor_->get_executor(), [&] {
      beast::error_code ec;
      acceptor_->close(ec);
      closed.set_value();
    });
    closed.get_future().wait();
  }
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.drain_timeout_ms);
  while (open_connections_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    // Idle keep-alive connections are closed each round; busy ones finish their
    // request and then see stopping_.
    for (int i = 0; i < pool_.size(); ++i) {
      LoopConnections* lc = loops_[static_cast<size_t>(i)].get();
      asio::post(pool_.context(i), [lc] {
        for (Connection* c : lc->all) c->CloseIfIdle();
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace infera::http
