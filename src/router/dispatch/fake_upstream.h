// FakeUpstream: a scripted Upstream for in-process router tests.
//
// Each worker (endpoint "host:port") answers from a queue of Scripts, the last one
// repeating. A script either fails the Send, or answers a status and body pieces,
// then ends, fails, or holds until the test releases it or the request is cancelled
// (the client went away) or its deadline passed on the test's clock (Expire()).
// Every request it got is recorded, except the active health checks' `GET /health`,
// which are counted apart and answered from their own queue (PushHealth; empty:
// 200 {"status":"ok"}), so the scripts of the requests are theirs alone.
//
// Thread-safety: the test thread scripts and inspects; the router's loops send.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "http/asio.h"
#include "router/dispatch/upstream.h"

namespace infera::router {

namespace asio = http::asio;

struct Script {
  absl::Status send_error{};  // non-OK: Send fails with it
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::string> pieces{};  // the body, piece by piece
  // After the pieces: end (OK), fail with this status, or hold.
  absl::Status read_error{};
  bool hold = false;              // wait for Release(), cancellation or Expire()
  bool hold_before_head = false;  // hold inside Send, before the head
  // Throw std::runtime_error: from Send, or from Read after the pieces (a stage that
  // throws: the pipeline's catch-all must account for it).
  bool throw_in_send = false;
  bool throw_after_pieces = false;
};

struct SentRequest {
  std::string host_port;
  std::string path;
  http::Headers headers;
  std::string body;
  int64_t deadline_ns = 0;
};

class FakeUpstream final : public Upstream {
 public:
  explicit FakeUpstream(const core::Clock& clock) : clock_(clock) {}

  void Push(const std::string& host_port, Script script);
  // Health-check answers of a worker, the last one repeating.
  void PushHealth(const std::string& host_port, Script script);
  int health_probes(const std::string& host_port) const;
  // Lets every held exchange go on (it then ends, or fails with read_error).
  void Release();
  // Held exchanges whose deadline has passed on the clock fail with DeadlineExceeded.
  void Expire();

  std::vector<SentRequest> sent() const;
  int cancelled() const;  // exchanges ended by cancellation
  int held() const;       // exchanges holding now

  http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> Send(
      UpstreamRequest request) override;

  // One holding exchange (internal; public for the response class).
  struct Waiter {
    asio::any_io_executor executor;
    std::shared_ptr<asio::steady_timer> timer;
    int64_t deadline_ns = 0;
    bool released = false;
    bool expired = false;
    bool cancelled = false;  // guarded by FakeUpstream::mu_ (as are the flags above)
  };
  // Suspends until Release(), Expire() past `deadline_ns`, or either cancellation;
  // OK, DeadlineExceeded or Cancelled.
  http::Awaitable<absl::Status> Hold(std::shared_ptr<http::Cancellation> request,
                                     int64_t deadline_ns, std::shared_ptr<http::Cancellation> own);
  void CountCancelled();

 private:
  void Wake(bool release, bool expire);

  const core::Clock& clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::deque<Script>> scripts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::deque<Script>> health_scripts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> health_probes_ ABSL_GUARDED_BY(mu_);
  std::vector<SentRequest> sent_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace infera::router
