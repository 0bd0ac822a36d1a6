// NatsInbox: the router's side of the NATS request transport below NatsUpstream
// (nats_upstream.h): the connection, the one wildcard subscription on the reply
// inboxes `_INBOX.<nuid>.*` that routes each reply frame to its request (NatsReply),
// the cancel resends and the transport's counters.
//
// Frames arrive on the libnats thread (Deliver) and are queued on the request's
// NatsReply; its reader (NatsResponse, on the request's loop) is woken through the
// reply's timer. A reply holds at most options.max_buffered_bytes of frames not yet
// read: past it the reply is marked overflow and emptied. A slow-consumer error from
// libnats marks every reply in flight dropped.
//
// Thread-safety: Register, Unregister, SendCancel and Count from any thread; the
// frame callbacks on libnats' thread; `replies` under mu, the resend queue under
// cancel_mu (its own thread sends them).
#pragma once

#include <nats/nats.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "base/mutex.h"
#include "event_wire/nats_connection.h"
#include "http/server.h"
#include "router/dispatch/nats_upstream_options.h"

namespace infera::router {

// How a request over NATS ended: infera_router_nats_requests_total{outcome}.
enum class NatsEnd : uint8_t {
  kOk,
  kWorkerError,
  kNoResponders,
  kIdleTimeout,
  kMaxDuration,
  kDeadline,
  kCancelled,
  kOverflow,
  kDropped,
  kNotConnected,
  kPublishError,
  kBadRequest,
};
inline constexpr size_t kNatsEndCount = 12;
// The outcome label of each NatsEnd, in order.
inline constexpr std::array<const char*, kNatsEndCount> kNatsEndNames = {
    "ok",        "worker_error", "no_responders", "idle_timeout",  "max_duration",  "deadline",
    "cancelled", "overflow",     "dropped",       "not_connected", "publish_error", "bad_request"};

// "1.5s": a duration in the transport's log and error texts.
std::string NatsSeconds(int64_t ms);

// One reply frame as the reader takes it.
struct NatsFrame {
  enum class Kind : uint8_t { kData, kDone, kError, kNoResponders };
  Kind kind = Kind::kData;
  std::string data;
  std::optional<int> status;
  std::string content_type;
};

// One request's reply frames, queued by the libnats thread for the request's loop.
struct NatsReply {
  explicit NatsReply(http::asio::any_io_executor executor) : timer(executor) {}
  http::asio::steady_timer timer;  // the reader waits on it; a queued frame cancels it
  base::Mutex mu;
  std::deque<NatsFrame> frames ABSL_GUARDED_BY(mu);
  uint64_t queued_bytes ABSL_GUARDED_BY(mu) = 0;
  bool closed ABSL_GUARDED_BY(mu) = false;    // a terminal frame is queued or the request failed
  bool overflow ABSL_GUARDED_BY(mu) = false;  // more than max_buffered_bytes waited for the reader
  bool dropped ABSL_GUARDED_BY(mu) = false;   // the subscription dropped messages (slow consumer)
  bool waiting ABSL_GUARDED_BY(mu) = false;   // the reader waits on timer
};

struct NatsInbox {
  using SteadyTime = std::chrono::steady_clock::time_point;

  explicit NatsInbox(NatsUpstreamOptions o) : options(std::move(o)) {}
  ~NatsInbox() { Stop(); }

  // Connects, subscribes the reply inboxes and starts the resend thread.
  absl::Status Start();
  void Stop();
  bool connected() const { return nc != nullptr && nc->connected(); }
  std::shared_ptr<NatsReply> Register(uint64_t id, http::asio::any_io_executor executor);
  // Forgets the request: its queued bytes leave the gauge, later frames are dropped.
  void Unregister(uint64_t id, NatsReply& reply);
  // Publishes `inbox` on `subject` now and options.cancel_sends - 1 more times.
  void SendCancel(const std::string& subject, const std::string& inbox);
  void Count(NatsEnd end) {
    ends[static_cast<size_t>(end)].fetch_add(1, std::memory_order_relaxed);
  }

  const NatsUpstreamOptions options;
  std::unique_ptr<events::NatsConnection> nc;  // set by Start, kept until destruction
  natsSubscription* sub = nullptr;
  std::string inbox_prefix;  // "_INBOX.<nuid>."
  std::atomic<uint64_t> next_id{1};

  std::array<std::atomic<uint64_t>, kNatsEndCount> ends{};
  std::atomic<int64_t> inflight{0};
  std::atomic<int64_t> buffered_bytes{0};
  std::atomic<uint64_t> reply_bytes{0}, late_frames{0}, cancels_sent{0}, slow_consumer{0};

 private:
  static void OnMessage(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure);
  // The reply of the inbox `msg` was sent to; null for a request that already ended.
  std::shared_ptr<NatsReply> ReplyOf(natsMsg* msg);
  void Deliver(natsMsg* msg);
  // Queues `frame` on `reply` (or marks it overflow); true when its reader waits.
  bool Enqueue(NatsReply& reply, NatsFrame frame);
  void OnAsyncError(natsSubscription* s, natsStatus status);
  void RunResends();
  static void Wake(const std::shared_ptr<NatsReply>& reply);

  base::Mutex mu;
  absl::flat_hash_map<uint64_t, std::shared_ptr<NatsReply>> replies ABSL_GUARDED_BY(mu);

  struct Resend {
    SteadyTime due;
    std::string subject, inbox;
    int left = 0;
  };
  base::Mutex cancel_mu;
  base::CondVar cancel_cv;
  std::deque<Resend> resends ABSL_GUARDED_BY(cancel_mu);  // due in order (one gap)
  bool stopping ABSL_GUARDED_BY(cancel_mu) = false;
  std::thread cancel_thread;
};

}  // namespace infera::router
