#include "http/server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "http/fd_limit.h"
#include "http/lazy_timer.h"
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

// Bytes of pipelined requests the disconnect watch buffers while a handler runs;
// past this it stops reading (and so stops noticing a disconnect) until the
// handler returns.
constexpr size_t kMaxWatchBufferBytes = 1u << 20;

// A refused connection is drained this long (so the client reads the 503 instead
// of a reset), and at most this many are drained at once.
constexpr int64_t kRefuseLingerMs = 500;
constexpr int kMaxLingeringRefusals = 64;

struct TransferEncodingVerdict {
  int status = 0;  // 0: acceptable (a single final "chunked")
  std::string message;
};

// RFC 9112 §6.1, §6.3: a request's transfer codings must end in exactly one
// "chunked"; this server decodes no other coding (501), and any other framing is
// ambiguous (400) — a body-less reading of it would let its bytes be parsed as the
// next request (request smuggling).
TransferEncodingVerdict CheckTransferEncoding(std::string_view values, bool http11) {
  if (!http11) return {400, "Transfer-Encoding is not allowed in an HTTP/1.0 request"};
  std::vector<std::string_view> codings;
  while (!values.empty()) {
    const size_t comma = values.find(',');
    std::string_view c = values.substr(0, comma);
    while (!c.empty() && (c.front() == ' ' || c.front() == '\t')) c.remove_prefix(1);
    while (!c.empty() && (c.back() == ' ' || c.back() == '\t')) c.remove_suffix(1);
    if (!c.empty()) codings.push_back(c);
    if (comma == std::string_view::npos) break;
    values.remove_prefix(comma + 1);
  }
  if (codings.empty()) return {400, "Transfer-Encoding is empty"};
  size_t chunked = 0;
  for (std::string_view c : codings) chunked += Headers::EqualsIgnoreCase(c, "chunked") ? 1 : 0;
  if (!Headers::EqualsIgnoreCase(codings.back(), "chunked") || chunked > 1) {
    return {400, "Transfer-Encoding must end in a single 'chunked'"};
  }
  if (codings.size() > 1) {
    return {501, "transfer coding '" + std::string(codings.front()) + "' is not supported"};
  }
  return {};
}

// RFC 9112 §5.2: obsolete line folding (a header line that starts with SP or HTAB)
// is refused: a folded Content-Length or Transfer-Encoding would be read one way
// here and another way by a proxy in front. `head`: the header through the last
// field's CRLF.
bool HasObsFold(std::string_view head) {
  for (size_t i = head.find("\r\n"); i != std::string_view::npos; i = head.find("\r\n", i + 2)) {
    if (i + 2 < head.size() && (head[i + 2] == ' ' || head[i + 2] == '\t')) return true;
  }
  return false;
}

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
  return {"application/json", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

// Connections registered per loop, touched only on that loop's thread.
struct Server::LoopConnections {
  std::unordered_set<Connection*> all;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server& server, int loop, tcp::socket socket)
      : server_(server),
        loop_(loop),
        socket_(std::move(socket)),
        deadline_(socket_.get_executor(), [this] { OnDeadline(); }) {}

  Awaitable<void> Run();
  // Closes the connection if it is between requests (shutdown).
  void CloseIfIdle() {
    if (idle_) {
      beast::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_both, ec);
      socket_.close(ec);
    }
  }

 private:
  friend class ResponseWriter;
  Awaitable<bool> WriteSimple(bhttp::response<bhttp::string_body>& res);
  // Reads until the request header is buffered (at most max_header_bytes), refuses
  // obs-fold (sets *obs_fold), then parses the header. Errors as Beast's
  // async_read_header reports them (header_limit past the limit).
  Awaitable<void> ReadHeader(bhttp::request_parser<bhttp::string_body>& parser,
                             beast::error_code& ec, bool* obs_fold);
  // Reads the rest of the body. A chunked body's chunk extensions count against
  // max_body_bytes with its data (`chunked_bytes`: data + extensions so far), and so
  // do the bytes of a chunk header or trailer still being received.
  Awaitable<void> ReadBody(bhttp::request_parser<bhttp::string_body>& parser,
                           const uint64_t& chunked_bytes, beast::error_code& ec);
  Awaitable<void> SendError(int status, std::string_view message, std::string_view target,
                            bool keep_alive);
  struct WatchState {
    ResponseWriter* writer = nullptr;
  };
  void Watch(std::shared_ptr<WatchState> state);
  // One deadline per connection (LazyTimer: one timer wait, re-armed lazily), for
  // the read under way (header or body) or the write. A read past its deadline is
  // cancelled and read_timed_out_ set: the socket stays open for the 408. A write past
  // its deadline closes the socket (the client does not read: nothing can be sent).
  void ArmWrite() {
    deadline_is_write_ = true;
    deadline_.SetAfter(std::chrono::milliseconds(server_.options_.write_timeout_ms),
                       shared_from_this());
  }
  void ArmReadDeadline(int64_t ms) {
    deadline_is_write_ = false;
    read_timed_out_ = false;
    deadline_.SetAfter(std::chrono::milliseconds(ms), shared_from_this());
  }
  void Disarm() { deadline_.Clear(); }
  void OnDeadline() {
    beast::error_code ec;
    if (deadline_is_write_) {
      socket_.close(ec);
      return;
    }
    read_timed_out_ = true;
    socket_.cancel(ec);
  }

  Server& server_;
  int loop_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  bool idle_ = true;
  bool keep_alive_ = true;
  bool head_request_ = false;  // the request being answered is HEAD: no body
  LazyTimer deadline_;
  bool deadline_is_write_ = false;
  bool read_timed_out_ = false;
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
  co_await bhttp::async_write(socket_, res, NoThrow(ec));
  Disarm();
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
  if (head_request_) {
    bhttp::response_serializer<bhttp::string_body> sr{res};
    ArmWrite();
    beast::error_code ec;
    co_await bhttp::async_write_header(socket_, sr, NoThrow(ec));
    Disarm();
    co_return;
  }
  co_await WriteSimple(res);
}

Awaitable<void> Connection::ReadHeader(bhttp::request_parser<bhttp::string_body>& parser,
                                       beast::error_code& ec, bool* obs_fold) {
  const size_t limit = server_.options_.max_header_bytes;
  size_t scanned = 0;  // bytes already searched for the header's end
  while (true) {
    const std::string_view data(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    const size_t end = data.find("\r\n\r\n", scanned > 3 ? scanned - 3 : 0);
    if (end != std::string_view::npos && end + 4 <= limit) {
      if (HasObsFold(data.substr(0, end + 2))) {
        *obs_fold = true;
        co_return;
      }
      const size_t used = parser.put(asio::buffer(data.data(), end + 4), ec);
      buffer_.consume(used);
      // Leading empty lines (RFC 9112 §2.2) or the like: let Beast read on.
      if (ec == bhttp::error::need_more) {
        ec = {};
        co_await bhttp::async_read_header(socket_, buffer_, parser, NoThrow(ec));
      }
      co_return;
    }
    if (data.size() >= limit) {
      ec = bhttp::error::header_limit;
      co_return;
    }
    scanned = data.size();
    const size_t n = co_await socket_.async_read_some(
        buffer_.prepare(std::max<size_t>(4096, std::min<size_t>(65536, limit - data.size()))),
        NoThrow(ec));
    if (ec) co_return;
    buffer_.commit(n);
  }
}

Awaitable<void> Connection::ReadBody(bhttp::request_parser<bhttp::string_body>& parser,
                                     const uint64_t& chunked_bytes, beast::error_code& ec) {
  const uint64_t limit = server_.options_.max_body_bytes;
  parser.eager(true);
  // Beast's own read loops on "need more" until an element completes, growing the
  // buffer with a chunk header that never ends: reads are issued here instead.
  while (true) {
    while (buffer_.size() > 0 && !parser.is_done()) {
      const size_t used = parser.put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == bhttp::error::need_more) {
        ec = {};
        break;
      }
      if (ec) co_return;
      if (used == 0) break;
    }
    if (parser.is_done()) co_return;
    // What stays buffered is an element not yet complete (a chunk header with its
    // extensions, or the trailer): it counts too.
    if (parser.chunked() && chunked_bytes + buffer_.size() > limit) {
      ec = bhttp::error::body_limit;
      co_return;
    }
    const size_t n = co_await socket_.async_read_some(buffer_.prepare(65536), NoThrow(ec));
    if (ec == asio::error::eof) {
      ec = {};
      parser.put_eof(ec);  // partial_message: the body was cut
      if (!ec && !parser.is_done()) ec = bhttp::error::partial_message;
      co_return;
    }
    if (ec) co_return;
    buffer_.commit(n);
  }
}

// Watches for the peer to close while the handler runs: one read on the socket (a
// speculative recv, then the reactor). Bytes that arrive (a pipelined request) go
// into the read buffer for Run() and the read is issued again, so a disconnect
// after pipelined bytes is seen too (up to kMaxWatchBufferBytes buffered); an
// error other than cancellation means the client is gone. Run() cancels the read
// when the handler returns and lets the completion run before it touches the
// buffer again.
void Connection::Watch(std::shared_ptr<WatchState> state) {
  if (buffer_.size() >= kMaxWatchBufferBytes) return;
  socket_.async_read_some(
      buffer_.prepare(4096),
      [self = shared_from_this(), state = std::move(state)](const beast::error_code& ec, size_t n) {
        if (!ec) {
          self->buffer_.commit(n);
          if (state->writer != nullptr) self->Watch(state);
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
    head_request_ = false;
    // Chunk data and extensions of a chunked body so far (ReadBody's limit).
    uint64_t chunked_bytes = 0;
    auto on_chunk = [&chunked_bytes, limit = opt.max_body_bytes](
                        uint64_t size, beast::string_view extensions, beast::error_code& cec) {
      chunked_bytes += size + extensions.size();
      if (chunked_bytes > limit) cec = bhttp::error::body_limit;
    };
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(opt.max_header_bytes);
    parser.body_limit(opt.max_body_bytes);
    parser.on_chunk_header(on_chunk);
    ArmReadDeadline(opt.idle_timeout_ms);
    beast::error_code ec;
    bool obs_fold = false;
    co_await ReadHeader(parser, ec, &obs_fold);
    Disarm();
    idle_ = false;
    if (obs_fold) {
      co_await SendError(400, "obsolete line folding (obs-fold) is not allowed in a request header",
                         "", false);
      break;
    }
    if (ec) {
      if (read_timed_out_) {
        // Quiet keep-alive connections close silently; a header begun and not
        // finished in time is a slow (or slowloris) client: tell it.
        if (buffer_.size() > 0) co_await SendError(408, "request not received in time", "", false);
      } else if (ec == bhttp::error::header_limit) {
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
    head_request_ = parser.get().method() == bhttp::verb::head;
    {
      std::string te;
      bool has_te = false;
      for (const auto& f : parser.get()) {
        if (f.name() != bhttp::field::transfer_encoding) continue;
        if (has_te) te.push_back(',');
        te.append(f.value().data(), f.value().size());
        has_te = true;
      }
      if (has_te) {
        TransferEncodingVerdict v = CheckTransferEncoding(te, parser.get().version() >= 11);
        if (v.status != 0) {
          co_await SendError(v.status, v.message, target, false);
          break;
        }
      }
    }
    {
      // RFC 9112 §3.2: an HTTP/1.1 request carries exactly one Host field (at most
      // one in HTTP/1.0); anything else is answered 400.
      int hosts = 0;
      for (const auto& f : parser.get()) hosts += f.name() == bhttp::field::host ? 1 : 0;
      if (parser.get().version() >= 11 ? hosts != 1 : hosts > 1) {
        co_await SendError(400,
                           hosts == 0 ? "the request has no Host header"
                                      : "the request has more than one Host header",
                           target, false);
        break;
      }
    }
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
      co_await bhttp::async_write(socket_, cont, NoThrow(wec));
      Disarm();
      if (wec) break;
    }
    beast::error_code rec;
    read_timed_out_ = false;
    // The body usually arrived with the header: parse what is buffered in place and
    // read from the socket (under the body deadline) only if more is needed.
    while (!parser.is_done() && buffer_.size() > 0) {
      size_t used = parser.put(buffer_.data(), rec);
      buffer_.consume(used);
      if (rec == bhttp::error::need_more) rec = {};
      if (rec || used == 0) break;
    }
    if (!rec && parser.chunked() && chunked_bytes + buffer_.size() > opt.max_body_bytes) {
      rec = bhttp::error::body_limit;
    }
    if (!rec && !parser.is_done()) {
      ArmReadDeadline(opt.request_timeout_ms);
      co_await ReadBody(parser, chunked_bytes, rec);
      Disarm();
    }
    if (rec) {
      if (read_timed_out_) {
        co_await SendError(
            408,
            "request body not received within " + std::to_string(opt.request_timeout_ms) + " ms",
            target, false);
      } else if (rec == bhttp::error::body_limit) {
        co_await SendError(
            413,
            "request body exceeds the limit of " + std::to_string(opt.max_body_bytes) + " bytes",
            target, false);
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
      auto ep = socket_.remote_endpoint(rep_ec);
      if (!rep_ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    }
    req.remote_address = peer_;

    ResponseWriter writer(this);
    // Watch for a disconnect, also when pipelined bytes are already buffered: the
    // client may have sent its next request and gone.
    watch_ = std::make_shared<WatchState>();
    watch_->writer = &writer;
    Watch(watch_);
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
      socket_.cancel(cec);
      co_await asio::post(socket_.get_executor(), use_awaitable);
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
  deadline_.Stop();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  socket_.close(ec);
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
  headers.AppendWireExcept(head, {"Content-Length", "Transfer-Encoding", "Connection"});
  bool keep = conn_->keep_alive_ && !conn_->server_.stopping();
  if (!keep) head.append("Connection: close\r\n");
  head.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n\r\n");
  conn_->ArmWrite();
  beast::error_code ec;
  // A response to HEAD has the head (Content-Length included) but no body.
  std::array<asio::const_buffer, 2> buffers = {
      asio::buffer(head), conn_->head_request_ ? asio::const_buffer() : asio::buffer(body)};
  co_await asio::async_write(conn_->socket_, buffers, NoThrow(ec));
  conn_->Disarm();
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
  for (const auto& f : headers.fields()) {
    if (Headers::IsWireSafe(f)) head->insert(f.name, f.value);  // as Send() drops them
  }
  head->keep_alive(conn_->keep_alive_ && !conn_->server_.stopping());
  head->chunked(true);
  conn_->stream_serializer_ =
      std::make_unique<bhttp::response_serializer<bhttp::empty_body>>(*head);
  conn_->ArmWrite();
  beast::error_code ec;
  co_await bhttp::async_write_header(conn_->socket_, *conn_->stream_serializer_, NoThrow(ec));
  conn_->Disarm();
  if (ec) {
    failed_ = true;
    MarkClientGone();
    co_return false;
  }
  co_return true;
}

Awaitable<bool> ResponseWriter::WriteChunk(std::string_view data) {
  if (failed_) co_return false;
  if (data.empty() || conn_->head_request_) co_return true;
  conn_->ArmWrite();
  beast::error_code ec;
  co_await asio::async_write(
      conn_->socket_, bhttp::make_chunk(asio::const_buffer(data.data(), data.size())), NoThrow(ec));
  conn_->Disarm();
  if (ec) {
    failed_ = true;
    MarkClientGone();
    co_return false;
  }
  co_return true;
}

Awaitable<bool> ResponseWriter::EndStream() {
  if (failed_) co_return false;
  if (conn_->head_request_) {
    finished_ = true;
    co_return true;
  }
  conn_->ArmWrite();
  beast::error_code ec;
  co_await asio::async_write(conn_->socket_, bhttp::make_chunk_last(), NoThrow(ec));
  conn_->Disarm();
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

Server::~Server() {
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

bool Server::LogLimiter::Allow() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next) {
    ++suppressed;
    return false;
  }
  next = now + std::chrono::seconds(1);
  return true;
}

absl::Status Server::Listen() {
  const OpenFileLimit fds = RaiseOpenFileLimit();
  fd_soft_limit_ = fds.soft;
  max_connections_ =
      options_.max_connections > 0 ? options_.max_connections : DefaultMaxConnections(fds.soft);
  if (fds.soft != fds.before) {
    spdlog::info("http: open file limit {} (raised from {}), max connections {}", fds.soft,
                 fds.before, max_connections_);
  } else {
    spdlog::info("http: open file limit {}, max connections {}", fds.soft, max_connections_);
  }
  if (spare_fd_ < 0) spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
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

int64_t Server::ConnectionCap() const {
  if (options_.max_connections > 0 || !options_.other_fds) return max_connections_;
  return std::min(max_connections_, DefaultMaxConnections(fd_soft_limit_, options_.other_fds()));
}

void Server::Start() { asio::co_spawn(pool_.context(0), AcceptLoop(), asio::detached); }

Awaitable<void> Server::AcceptLoop() {
  while (!stopping_.load()) {
    int loop = pool_.NextIndex();
    beast::error_code ec;
    auto socket = co_await acceptor_->async_accept(pool_.context(loop), NoThrow(ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || stopping_.load()) break;
      if (accept_log_.Allow()) {
        spdlog::warn("http: accept failed: {} ({} more in the last second not logged)",
                     ec.message(), accept_log_.suppressed);
        accept_log_.suppressed = 0;
      }
      if (ec == asio::error::no_descriptors && spare_fd_ >= 0) {
        RefuseWithSpareFd();
        continue;
      }
      asio::steady_timer t(acceptor_->get_executor(), std::chrono::milliseconds(10));
      beast::error_code tec;
      co_await t.async_wait(NoThrow(tec));
      continue;
    }
    if (const int64_t cap = ConnectionCap(); open_connections_.load() >= cap) {
      Refuse(std::move(socket), "too many open connections (limit " + std::to_string(cap) + ")",
             /*linger=*/true);
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

void Server::Refuse(tcp::socket socket, std::string_view why, bool linger) {
  refused_connections_.fetch_add(1);
  if (refuse_log_.Allow()) {
    spdlog::warn(
        "http: refusing connections: {} ({} open; {} more refused in the last second "
        "not logged)",
        why, open_connections_.load(), refuse_log_.suppressed);
    refuse_log_.suppressed = 0;
  }
  ErrorBody eb = options_.error_body(503, std::string(why) + "; retry later", "");
  std::string text = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: " + eb.content_type +
                     "\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
                     std::to_string(eb.body.size()) + "\r\n\r\n" + eb.body;
  beast::error_code ec;
  socket.non_blocking(true, ec);
  socket.send(asio::buffer(text), 0, ec);  // small: fits the socket buffer
  socket.shutdown(tcp::socket::shutdown_send, ec);
  // Closing with unread request bytes would reset the connection and could destroy
  // the 503 before the client reads it: drain briefly first (bounded in count).
  if (!linger || *lingering_refusals_ >= kMaxLingeringRefusals) {
    socket.close(ec);
    return;
  }
  ++*lingering_refusals_;
  auto sock = std::make_shared<tcp::socket>(std::move(socket));
  auto timer = std::make_shared<asio::steady_timer>(acceptor_->get_executor(),
                                                    std::chrono::milliseconds(kRefuseLingerMs));
  auto buf = std::make_shared<std::array<char, 1024>>();
  auto drain = std::make_shared<std::function<void()>>();
  *drain = [sock, buf, drain, timer]() {
    sock->async_read_some(asio::buffer(*buf), [drain, timer](const beast::error_code& e, size_t) {
      if (!e) return (*drain)();
      timer->cancel();
      *drain = nullptr;  // breaks the cycle
    });
  };
  timer->async_wait([count = lingering_refusals_, sock](const beast::error_code&) {
    beast::error_code cec;
    sock->close(cec);
    --*count;
  });
  (*drain)();
}

void Server::RefuseWithSpareFd() {
  ::close(spare_fd_);
  spare_fd_ = -1;
  // The acceptor's descriptor is non-blocking (Asio sets it for async accepts).
  const int fd = ::accept4(acceptor_->native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    beast::error_code ec;
    tcp::socket socket(acceptor_->get_executor());
    socket.assign(acceptor_->local_endpoint(ec).protocol(), fd, ec);
    if (ec) {
      ::close(fd);
    } else {
      Refuse(std::move(socket), "the server is out of file descriptors", /*linger=*/false);
    }
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
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
