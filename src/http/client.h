// Client: an asynchronous HTTP/1.1 client with a keep-alive connection pool.
//
// One Client per IoPool loop (its connections live on that loop). Send() writes a
// request and returns once the response head arrived; the body is then read
// piece by piece with ClientStream::Read(), each piece as soon as it arrived
// (chunked encoding removed), which is what a streaming proxy relays. A fully
// read response on a keep-alive connection returns the connection to the pool
// when the ClientStream is destroyed; anything else closes it.
//
// A request on a pooled connection that fails before any response byte (the
// server closed the idle connection) is retried once on a fresh connection.
// Interim responses (1xx other than 101) are skipped: Send() returns the final one.
//
// Errors: cannot connect / connection lost -> Unavailable; deadline passed ->
// DeadlineExceeded; Cancel() -> Cancelled; malformed response -> DataLoss; this
// process's own descriptors or buffers ran out (EMFILE, ENFILE, ENOBUFS, ENOMEM when
// creating the socket, connecting or writing) -> ResourceExhausted with
// LocalErrorKind() naming it: no fault of the server.
//
// Thread-safety: a Client and its streams are used only on their loop's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "http/asio.h"
#include "http/headers.h"
#include "http/url.h"

namespace infera::http {

struct ClientOptions {
  int64_t connect_timeout_ms = 5'000;
  size_t max_idle_per_host = 256;
  uint32_t max_response_header_bytes = 64u << 10;
  uint64_t max_response_body_bytes = 1ull << 30;
};

using Deadline = std::chrono::steady_clock::time_point;

// "emfile", "enfile", "enobufs" or "enomem" when `status` is a local resource failure
// of Send (see above); "" otherwise.
std::string LocalErrorKind(const absl::Status& status);
// A ResourceExhausted status carrying `kind` for LocalErrorKind() (fakes use it too).
absl::Status LocalResourceError(std::string_view kind, std::string message);

// Cancels an exchange from outside (a proxy whose client disconnected): Cancel()
// closes the upstream connection of the Send or ClientStream bound to it, so a
// pending connect, write or read ends with Cancelled. Same-loop use only.
class Cancellation {
 public:
  void Cancel() {
    if (cancelled_) return;
    cancelled_ = true;
    if (fn_) {
      auto fn = std::move(fn_);
      fn_ = nullptr;
      fn();
    }
  }
  bool cancelled() const { return cancelled_; }
  // Used by Client/ClientStream: what Cancel() does while an exchange is pending.
  void Bind(std::function<void()> fn) { fn_ = std::move(fn); }
  void Unbind() { fn_ = nullptr; }

 private:
  bool cancelled_ = false;
  std::function<void()> fn_;
};

class ClientStream {
 public:
  struct Impl;
  explicit ClientStream(std::unique_ptr<Impl> impl);
  ~ClientStream();
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  int status() const;
  const Headers& headers() const;
  // The next piece of the body: what arrived and can be had without waiting (at
  // most 64 KiB), waiting only when nothing is there; nullopt after the end of the
  // body. A failure after some bytes returns those bytes first, then the error.
  Awaitable<absl::StatusOr<std::optional<std::string>>> Read();
  // The rest of the body. More than max_bytes -> ResourceExhausted.
  Awaitable<absl::StatusOr<std::string>> ReadAll(uint64_t max_bytes);
  // Aborts the exchange: closes the connection; a pending Read fails with
  // Cancelled. Safe to call more than once and from an OnClientGone callback.
  void Cancel();
  bool cancelled() const;

 private:
  friend class Client;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<Cancellation> cancellation_;
};

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;
};

class Client {
 public:
  Client(asio::any_io_executor executor, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Parameters are taken by value: the coroutine may outlive the caller's
  // temporaries. Sends `method target` to `endpoint` (target is appended to its base_path).
  // Host, Content-Length and keep-alive are set here.
  Awaitable<absl::StatusOr<std::unique_ptr<ClientStream>>> Send(
      Endpoint endpoint, std::string method, std::string target, Headers headers, std::string body,
      Deadline deadline, std::shared_ptr<Cancellation> cancel = nullptr);
  // Send + ReadAll.
  Awaitable<absl::StatusOr<ClientResponse>> Fetch(Endpoint endpoint, std::string method,
                                                  std::string target, Headers headers,
                                                  std::string body, Deadline deadline);

  size_t idle_connections() const;

  struct Pool;
  struct Conn;

 private:
  asio::any_io_executor executor_;
  ClientOptions options_;
  std::shared_ptr<Pool> pool_;
};

}  // namespace infera::http
