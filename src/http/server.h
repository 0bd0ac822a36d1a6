// Server: an asynchronous HTTP/1.1 server on Boost.Beast with C++20 coroutines.
//
// One accept loop hands each connection to a loop of an IoPool (round-robin);
// the connection's coroutine reads requests (keep-alive, pipelining), calls the
// Handler coroutine, and writes its answer, either whole (Send) or streamed with
// chunked transfer encoding (BeginStream/WriteChunk/EndStream), chunk by chunk as
// the handler produces them.
//
// Limits, each answered with a clear JSON error (see ServerOptions::error_body):
// headers over max_header_bytes -> 431, body over max_body_bytes -> 413 (checked
// against Content-Length before reading the body), a request not fully received
// within request_timeout_ms -> 408 (also a header begun but not finished within
// idle_timeout_ms), malformed HTTP -> 400, a Transfer-Encoding other than a single
// final "chunked" -> 400 or 501 (RFC 9112 §6.1; never read as a body-less request);
// idle keep-alive connections are closed after idle_timeout_ms; a client that does
// not read a response is cut off after write_timeout_ms. Connections past
// max_connections get 503 and are closed (see Listen()). Every error closes the
// connection. Responses to HEAD carry no body.
//
// Client disconnects: while a handler runs, the connection watches its socket;
// when the peer closes or resets it, ResponseWriter::client_gone() turns true and
// the callback given to OnClientGone runs (on the connection's loop), so a proxy
// can cancel its upstream request.
//
// Shutdown() is graceful: stop accepting, close idle connections, let in-flight
// requests (including long streams) finish, then return (or give up after
// drain_timeout_ms).
//
// Thread-safety: Listen/Start/Shutdown from one controlling thread. The handler
// runs on the connection's loop thread; a ResponseWriter is used only there.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "http/asio.h"
#include "http/headers.h"
#include "http/io_pool.h"

namespace infera::http {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // "/v1/x?y=z"
  Headers headers;
  std::string body;
  std::string remote_address;

  // Target without the query string.
  std::string_view path() const;
  // Decoded value of query parameter `name`, or "" when absent.
  std::string QueryParam(std::string_view name) const;
};

// Body of an error the server emits itself (limits, malformed HTTP).
struct ErrorBody {
  std::string content_type;
  std::string body;
};
using ErrorBodyFn =
    std::function<ErrorBody(int status, std::string_view message, std::string_view target)>;

// {"error":{"message":..., "type":..., "code":status}} — the OpenAI error shape.
ErrorBody DefaultErrorBody(int status, std::string_view message, std::string_view target);

struct ServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 0;  // 0: the OS picks; see Server::port()
  uint64_t max_body_bytes = 16ull << 20;
  uint32_t max_header_bytes = 64u << 10;
  int64_t idle_timeout_ms = 60'000;
  int64_t request_timeout_ms = 60'000;
  int64_t write_timeout_ms = 60'000;
  int64_t drain_timeout_ms = 30'000;
  // Open client connections; 0: DefaultMaxConnections() of the open-file limit
  // (http/fd_limit.h). Past it a new connection gets 503 and is closed.
  int64_t max_connections = 0;
  // Descriptors other parts of the process hold for themselves (the router: its KV
  // event subscriptions, 4 per followed target over ZMQ). With max_connections 0 the
  // cap is re-derived at each accept without them, so a burst of clients cannot take
  // the descriptors a growing fleet's subscriptions need. Called on the accepting
  // thread; must be cheap and thread-safe. Empty: none.
  std::function<int64_t()> other_fds;
  ErrorBodyFn error_body = DefaultErrorBody;
};

class Connection;

class ResponseWriter {
 public:
  explicit ResponseWriter(Connection* conn) : conn_(conn) {}

  // A whole response with Content-Length. Returns false when the client is gone.
  // REQUIRES: nothing was sent yet.
  Awaitable<bool> Send(int status, Headers headers, std::string body);
  // Starts a chunked response. REQUIRES: nothing was sent yet.
  Awaitable<bool> BeginStream(int status, Headers headers);
  // Sends one chunk now (an empty `data` sends nothing). REQUIRES: BeginStream.
  Awaitable<bool> WriteChunk(std::string_view data);
  // Ends the chunked body. REQUIRES: BeginStream.
  Awaitable<bool> EndStream();

  // Runs `fn` once if the client disconnects while the handler is running.
  void OnClientGone(std::function<void()> fn) { on_gone_ = std::move(fn); }
  bool client_gone() const { return client_gone_; }
  bool started() const { return started_; }
  bool finished() const { return finished_; }
  bool failed() const { return failed_; }

 private:
  friend class Connection;
  void MarkClientGone();

  Connection* conn_;
  std::function<void()> on_gone_;
  bool client_gone_ = false;
  bool started_ = false;
  bool finished_ = false;
  bool failed_ = false;
};

// The handler must answer every request (Send, or BeginStream..EndStream); when it
// returns without answering, the server answers 500. Exceptions are caught and
// answered 500 when possible.
using Handler = std::function<Awaitable<void>(Request&, ResponseWriter&)>;

class Server {
 public:
  Server(IoPool& pool, ServerOptions options, Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Raises the soft open-file limit to the hard one, derives max_connections when
  // unset, binds and listens. After OK, port() is the bound port.
  absl::Status Listen();
  uint16_t port() const { return port_; }
  int64_t max_connections() const { return max_connections_; }
  // The cap in force now: max_connections(), lowered by ServerOptions::other_fds when
  // the cap is derived from the open-file limit.
  int64_t ConnectionCap() const;
  // Connections refused because max_connections were open or descriptors ran out.
  uint64_t refused_connections() const { return refused_connections_.load(); }
  // Starts accepting (the pool's loops run the connections).
  void Start();
  // Graceful shutdown; blocks until in-flight requests finish or the drain
  // timeout passes. Call from a thread outside the pool, with the pool running.
  void Shutdown();

  int64_t open_connections() const { return open_connections_.load(); }
  bool stopping() const { return stopping_.load(); }

 private:
  friend class Connection;
  Awaitable<void> AcceptLoop();
  // Answers 503 on a connection that is not taken (over the cap), then closes it.
  // `linger`: drain the client's request bytes briefly before closing (else the close
  // may reset the connection before the client read the 503).
  void Refuse(asio::ip::tcp::socket socket, std::string_view why, bool linger);
  // accept() failed for lack of descriptors: frees the spare one, accepts the
  // waiting connection and refuses it, so the backlog drains instead of timing out.
  void RefuseWithSpareFd();

  IoPool& pool_;
  ServerOptions options_;
  Handler handler_;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> open_connections_{0};
  std::atomic<uint64_t> refused_connections_{0};
  int64_t max_connections_ = 0;
  int64_t fd_soft_limit_ = 0;
  int spare_fd_ = -1;  // /dev/null, closed to make room for one accept on EMFILE
  // Refused connections being drained; accept loop's thread only.
  std::shared_ptr<int> lingering_refusals_ = std::make_shared<int>(0);
  // One log line per second at most for each (accept loop only).
  struct LogLimiter {
    std::chrono::steady_clock::time_point next{};
    uint64_t suppressed = 0;
    // True when a line may be written now; then `suppressed` is how many were not.
    bool Allow();
  };
  LogLimiter accept_log_, refuse_log_;
  struct LoopConnections;
  std::vector<std::unique_ptr<LoopConnections>> loops_;
};

}  // namespace infera::http
