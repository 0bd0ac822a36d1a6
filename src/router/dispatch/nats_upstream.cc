#include "router/dispatch/nats_upstream.h"

#include <nats/nats.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "base/mutex.h"
#include "event_wire/nats_connection.h"
#include "router/metrics/metrics.h"
#include "spdlog/spdlog.h"
#include "transport/nats_request_wire.h"

namespace infera::router {
namespace {

using SteadyClock = std::chrono::steady_clock;
using SteadyTime = SteadyClock::time_point;
using transport::FrameType;

// How a request over NATS ended: infera_router_nats_requests_total{outcome}.
enum class End : uint8_t {
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
constexpr size_t kEndCount = 12;
constexpr std::array<const char*, kEndCount> kEndNames = {
    "ok",        "worker_error", "no_responders", "idle_timeout",  "max_duration",  "deadline",
    "cancelled", "overflow",     "dropped",       "not_connected", "publish_error", "bad_request"};

// The reply inboxes' subscription: what libnats may hold before its callback takes the
// messages (the callback only moves them to their request, so this stays near 0).
constexpr int kSubPendingBytes = 256 << 20;
constexpr size_t kMaxErrorText = 500;

struct Frame {
  enum class Kind : uint8_t { kData, kDone, kError, kNoResponders };
  Kind kind = Kind::kData;
  std::string data;
  std::optional<int> status;
  std::string content_type;
};

// One request's reply frames, queued by the libnats thread for the request's loop.
struct Reply {
  explicit Reply(http::asio::any_io_executor executor) : timer(executor) {}
  http::asio::steady_timer timer;  // the reader waits on it; a queued frame cancels it
  base::Mutex mu;
  std::deque<Frame> frames ABSL_GUARDED_BY(mu);
  uint64_t queued_bytes ABSL_GUARDED_BY(mu) = 0;
  bool closed ABSL_GUARDED_BY(mu) = false;    // a terminal frame is queued or the request failed
  bool overflow ABSL_GUARDED_BY(mu) = false;  // more than max_buffered_bytes waited for the reader
  bool dropped ABSL_GUARDED_BY(mu) = false;   // the subscription dropped messages (slow consumer)
  bool waiting ABSL_GUARDED_BY(mu) = false;   // the reader waits on timer
};

const char* HeaderOf(natsMsg* msg, const char* key) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, key, &value) != NATS_OK) return nullptr;
  return value;
}

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%gs", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::string Trim(std::string text) {
  if (text.size() > kMaxErrorText) text.resize(kMaxErrorText);
  return text;
}

}  // namespace

absl::Status ValidateNatsUpstreamOptions(const NatsUpstreamOptions& o) {
  if (absl::Status s = transport::CheckTimeoutsMs(o.idle_timeout_ms, o.max_duration_ms); !s.ok()) {
    return s;
  }
  if (o.max_buffered_bytes < (64u << 10)) {
    return absl::InvalidArgumentError("the NATS reply buffer must be at least 64 KiB");
  }
  if (o.cancel_sends < 1 || o.cancel_sends > 10 || o.cancel_gap_ms < 0) {
    return absl::InvalidArgumentError("NATS cancel resends must be 1 to 10, gap >= 0");
  }
  return absl::OkStatus();
}

struct NatsUpstream::Core {
  explicit Core(NatsUpstreamOptions o) : options(std::move(o)) {}
  ~Core() { Stop(); }

  absl::Status Start();
  void Stop();
  bool connected() const { return nc != nullptr && nc->connected(); }
  std::shared_ptr<Reply> Register(uint64_t id, http::asio::any_io_executor executor);
  // Forgets the request: its queued bytes leave the gauge, later frames are dropped.
  void Unregister(uint64_t id, Reply& reply);
  // Publishes `inbox` on `subject` now and options.cancel_sends - 1 more times.
  void SendCancel(const std::string& subject, const std::string& inbox);
  void Count(End end) { ends[static_cast<size_t>(end)].fetch_add(1, std::memory_order_relaxed); }

  static void OnMessage(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure);
  void Deliver(natsMsg* msg);
  void OnAsyncError(natsSubscription* s, natsStatus status);
  void RunResends();
  static void Wake(const std::shared_ptr<Reply>& reply);

  const NatsUpstreamOptions options;
  std::unique_ptr<events::NatsConnection> nc;  // set by Start, kept until destruction
  natsSubscription* sub = nullptr;
  std::string inbox_prefix;  // "_INBOX.<nuid>."
  std::atomic<uint64_t> next_id{1};

  base::Mutex mu;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Reply>> replies ABSL_GUARDED_BY(mu);

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

  std::array<std::atomic<uint64_t>, kEndCount> ends{};
  std::atomic<int64_t> inflight{0};
  std::atomic<int64_t> buffered_bytes{0};
  std::atomic<uint64_t> reply_bytes{0}, late_frames{0}, cancels_sent{0}, slow_consumer{0};
};

absl::Status NatsUpstream::Core::Start() {
  events::NatsOptions nats;
  nats.url = options.nats_url;
  nats.name = "infera-router-req";
  nats.on_async_error = [this](natsSubscription* s, natsStatus status) { OnAsyncError(s, status); };
  auto connected_or = events::NatsConnection::Connect(std::move(nats));
  if (!connected_or.ok()) return connected_or.status();
  nc = *std::move(connected_or);
  natsInbox* inbox = nullptr;
  natsStatus s = natsInbox_Create(&inbox);
  if (s != NATS_OK) return events::NatsError("nats inbox", s);
  inbox_prefix = std::string(inbox) + ".";
  natsInbox_Destroy(inbox);
  const std::string subject = inbox_prefix + "*";
  s = natsConnection_Subscribe(&sub, nc->conn(), subject.c_str(), &Core::OnMessage, this);
  if (s != NATS_OK) {
    sub = nullptr;
    return events::NatsError("subscribe " + subject, s);
  }
  natsSubscription_SetPendingLimits(sub, -1, kSubPendingBytes);
  // The first request must not race the subscription to the server.
  if (nc->connected()) natsConnection_FlushTimeout(nc->conn(), nc->request_timeout_ms());
  cancel_thread = std::thread([this] { RunResends(); });
  return absl::OkStatus();
}

void NatsUpstream::Core::Stop() {
  {
    base::MutexLock lock(cancel_mu);
    stopping = true;
  }
  cancel_cv.NotifyAll();
  if (cancel_thread.joinable()) cancel_thread.join();
  if (sub != nullptr && nc != nullptr) events::DestroySubscription(sub, nc->request_timeout_ms());
}

std::shared_ptr<Reply> NatsUpstream::Core::Register(uint64_t id,
                                                    http::asio::any_io_executor executor) {
  auto reply = std::make_shared<Reply>(std::move(executor));
  base::MutexLock lock(mu);
  replies.emplace(id, reply);
  return reply;
}

void NatsUpstream::Core::Unregister(uint64_t id, Reply& reply) {
  {
    base::MutexLock lock(mu);
    replies.erase(id);
  }
  base::MutexLock lock(reply.mu);
  buffered_bytes.fetch_sub(static_cast<int64_t>(reply.queued_bytes));
  reply.queued_bytes = 0;
  reply.frames.clear();
  reply.closed = true;
}

void NatsUpstream::Core::OnMessage(natsConnection*, natsSubscription*, natsMsg* msg,
                                   void* closure) {
  static_cast<Core*>(closure)->Deliver(msg);
}

void NatsUpstream::Core::Wake(const std::shared_ptr<Reply>& reply) {
  http::asio::post(reply->timer.get_executor(), [reply] { reply->timer.cancel(); });
}

void NatsUpstream::Core::Deliver(natsMsg* msg) {
  const std::string_view subject = natsMsg_GetSubject(msg);
  uint64_t id = 0;
  std::shared_ptr<Reply> reply;
  if (subject.size() > inbox_prefix.size()) {
    const char* first = subject.data() + inbox_prefix.size();
    const char* last = subject.data() + subject.size();
    auto [p, ec] = std::from_chars(first, last, id);
    if (ec == std::errc() && p == last) {
      base::MutexLock lock(mu);
      if (auto it = replies.find(id); it != replies.end()) reply = it->second;
    }
  }
  if (reply == nullptr) {  // a request that already ended (a timeout, a cancel)
    late_frames.fetch_add(1, std::memory_order_relaxed);
    natsMsg_Destroy(msg);
    return;
  }
  Frame frame;
  if (natsMsg_IsNoResponders(msg)) {
    frame.kind = Frame::Kind::kNoResponders;
  } else {
    switch (transport::ParseFrameType(HeaderOf(msg, transport::kTypeHeader))) {
      case FrameType::kData:
        frame.kind = Frame::Kind::kData;
        break;
      case FrameType::kDone:
        frame.kind = Frame::Kind::kDone;
        break;
      case FrameType::kError:
        frame.kind = Frame::Kind::kError;
        break;
    }
    frame.status = transport::ParseStatus(HeaderOf(msg, transport::kStatusHeader));
    if (const char* ct = HeaderOf(msg, transport::kContentTypeHeader)) frame.content_type = ct;
    frame.data.assign(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
  }
  natsMsg_Destroy(msg);
  const uint64_t size = frame.data.size();
  reply_bytes.fetch_add(size, std::memory_order_relaxed);
  bool wake = false;
  {
    base::MutexLock lock(reply->mu);
    if (reply->closed) {
      late_frames.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (reply->queued_bytes + size > options.max_buffered_bytes) {
      // The reader (the client) is slower than the worker: fail the request rather
      // than hold an unbounded answer; the reader tells the worker to cancel.
      reply->overflow = true;
      reply->closed = true;
      buffered_bytes.fetch_sub(static_cast<int64_t>(reply->queued_bytes));
      reply->queued_bytes = 0;
      reply->frames.clear();
    } else {
      reply->queued_bytes += size;
      buffered_bytes.fetch_add(static_cast<int64_t>(size));
      reply->closed = frame.kind != Frame::Kind::kData;
      reply->frames.push_back(std::move(frame));
    }
    wake = reply->waiting;
    reply->waiting = false;
  }
  if (wake) Wake(reply);
}

void NatsUpstream::Core::OnAsyncError(natsSubscription* s, natsStatus status) {
  if (s != sub || status != NATS_SLOW_CONSUMER) return;
  // Some reply lost frames and which one is unknown: every request in flight fails
  // rather than relay an answer with a hole in it.
  slow_consumer.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::shared_ptr<Reply>> all;
  {
    base::MutexLock lock(mu);
    for (const auto& [id, reply] : replies) all.push_back(reply);
  }
  for (const auto& reply : all) {
    bool wake = false;
    {
      base::MutexLock lock(reply->mu);
      reply->dropped = true;
      reply->closed = true;
      wake = reply->waiting;
      reply->waiting = false;
    }
    if (wake) Wake(reply);
  }
}

void NatsUpstream::Core::SendCancel(const std::string& subject, const std::string& inbox) {
  if (natsConnection_PublishString(nc->conn(), subject.c_str(), inbox.c_str()) == NATS_OK) {
    cancels_sent.fetch_add(1, std::memory_order_relaxed);
  }
  if (options.cancel_sends <= 1) return;
  {
    base::MutexLock lock(cancel_mu);
    if (stopping) return;
    resends.push_back({SteadyClock::now() + std::chrono::milliseconds(options.cancel_gap_ms),
                       subject, inbox, options.cancel_sends - 1});
  }
  cancel_cv.NotifyOne();
}

void NatsUpstream::Core::RunResends() {
  cancel_mu.lock();
  while (!stopping) {
    if (resends.empty()) {
      cancel_cv.Wait(cancel_mu);
      continue;
    }
    if (SteadyClock::now() < resends.front().due) {
      cancel_cv.WaitUntil(cancel_mu, resends.front().due);
      continue;
    }
    Resend r = std::move(resends.front());
    resends.pop_front();
    cancel_mu.unlock();
    if (natsConnection_PublishString(nc->conn(), r.subject.c_str(), r.inbox.c_str()) == NATS_OK) {
      cancels_sent.fetch_add(1, std::memory_order_relaxed);
    }
    cancel_mu.lock();
    if (--r.left > 0) {
      r.due = SteadyClock::now() + std::chrono::milliseconds(options.cancel_gap_ms);
      resends.push_back(std::move(r));
    }
  }
  cancel_mu.unlock();
}

namespace {

using Core = NatsUpstream::Core;

// One request over NATS: the head (AwaitHead, from Send), then the body (Read).
class NatsResponse final : public UpstreamResponse {
 public:
  NatsResponse(std::shared_ptr<Core> core, std::shared_ptr<Reply> reply, uint64_t id,
               std::string inbox, const std::string& worker_id, bool stream,
               std::shared_ptr<http::Cancellation> cancel, SteadyTime request_deadline)
      : core_(std::move(core)),
        reply_(std::move(reply)),
        id_(id),
        inbox_(std::move(inbox)),
        worker_id_(worker_id),
        cancel_subject_(transport::CancelSubject(worker_id)),
        stream_(stream),
        cancel_(std::move(cancel)),
        request_deadline_(request_deadline) {
    const SteadyTime now = SteadyClock::now();
    max_deadline_ = core_->options.max_duration_ms > 0
                        ? now + std::chrono::milliseconds(core_->options.max_duration_ms)
                        : SteadyTime::max();
    core_->inflight.fetch_add(1, std::memory_order_relaxed);
    if (cancel_) cancel_->Bind([this] { Interrupt(); });
  }

  ~NatsResponse() override {
    if (cancel_) cancel_->Unbind();
    SendCancelIfWorking();
    core_->Unregister(id_, *reply_);
    core_->Count(end_);
    core_->inflight.fetch_sub(1, std::memory_order_relaxed);
  }

  int status() const override { return status_; }
  const http::Headers& headers() const override { return headers_; }

  // The publish failed: nothing reached the worker.
  void PublishFailed() {
    finished_ = true;
    end_ = End::kPublishError;
  }

  // Waits for the answer's head (nats_upstream.h). Not OK: Send fails with it.
  http::Awaitable<absl::Status> AwaitHead() {
    auto first = co_await NextFrame();
    if (!first.ok()) co_return first.status();
    switch (first->kind) {
      case Frame::Kind::kNoResponders:
        finished_ = true;
        end_ = End::kNoResponders;
        co_return WithClientMessage(
            absl::UnavailableError("no responders on " + transport::RequestSubject(worker_id_) +
                                   " (nobody serves the worker's NATS subject)"),
            "no responders on its NATS subject");
      case Frame::Kind::kError:
        co_return WorkerError(std::move(first->data));
      case Frame::Kind::kDone:
        SetHead(first->status.value_or(200), first->content_type);
        Done();
        co_return absl::OkStatus();
      case Frame::Kind::kData:
        break;
    }
    if (first->status || stream_) {
      SetHead(first->status.value_or(200), first->content_type);
      TakeData(std::move(first->data));
      co_return absl::OkStatus();
    }
    // A unary answer without rs-status (Infera's workers): the status comes with done.
    std::string body = std::move(first->data);
    for (;;) {
      auto next = co_await NextFrame();
      if (!next.ok()) co_return next.status();
      if (next->kind == Frame::Kind::kData) {
        body += next->data;
        if (body.size() > core_->options.max_buffered_bytes) {
          co_return Fail(End::kOverflow, absl::ResourceExhaustedError(
                                             "the answer is over " +
                                             std::to_string(core_->options.max_buffered_bytes) +
                                             " bytes before its status arrived"));
        }
        continue;
      }
      if (next->kind == Frame::Kind::kDone) {
        SetHead(next->status.value_or(200), next->content_type);
        TakeData(std::move(body));
        Done();
        co_return absl::OkStatus();
      }
      co_return WorkerError(std::move(next->data));
    }
  }

  http::Awaitable<absl::StatusOr<std::optional<std::string>>> Read() override {
    for (;;) {
      if (!ready_.empty()) {
        std::string piece = std::move(ready_.front());
        ready_.pop_front();
        co_return std::optional<std::string>(std::move(piece));
      }
      if (done_) {
        if (held_.empty()) co_return std::optional<std::string>();
        std::string rest = std::move(held_);  // the stream ended without a blank line
        held_.clear();
        co_return std::optional<std::string>(std::move(rest));
      }
      if (!failed_.ok()) co_return failed_;
      auto frame = co_await NextFrame();
      if (!frame.ok()) co_return frame.status();
      switch (frame->kind) {
        case Frame::Kind::kData:
          TakeData(std::move(frame->data));
          break;
        case Frame::Kind::kDone:
          Done();
          break;
        case Frame::Kind::kError:
        case Frame::Kind::kNoResponders:
          co_return WorkerError(std::move(frame->data));
      }
    }
  }

  http::Awaitable<absl::StatusOr<std::string>> ReadAll(uint64_t max_bytes) override {
    std::string all;
    for (;;) {
      auto piece = co_await Read();
      if (!piece.ok()) co_return piece.status();
      if (!piece->has_value()) co_return all;
      all += **piece;
      if (all.size() > max_bytes) {
        co_return absl::ResourceExhaustedError("answer over " + std::to_string(max_bytes) +
                                               " bytes");
      }
    }
  }

  void Cancel() override {
    Interrupt();
    SendCancelIfWorking();
  }

 private:
  // The request's cancellation or Cancel(): a pending wait ends with Cancelled.
  void Interrupt() {
    if (cancelled_) return;
    cancelled_ = true;
    reply_->timer.cancel();
  }

  void SendCancelIfWorking() {
    if (finished_ || cancel_sent_) return;
    cancel_sent_ = true;
    core_->SendCancel(cancel_subject_, inbox_);
  }

  absl::Status Fail(End end, absl::Status status) {
    end_ = end;
    failed_ = status;
    held_.clear();  // never hand out half an event after a failure
    return status;
  }

  absl::Status WorkerError(std::string text) {
    finished_ = true;
    // (The worker's own error text, as a worker's 5xx message is relayed.)
    return Fail(End::kWorkerError,
                ClientReadable(absl::UnavailableError("error frame: " + Trim(text))));
  }

  void Done() {
    finished_ = true;
    done_ = true;
    end_ = End::kOk;
  }

  void SetHead(int status, const std::string& content_type) {
    status_ = status;
    std::string ct = content_type;
    if (ct.empty()) ct = status == 200 && stream_ ? "text/event-stream" : "application/json";
    sse_ = status == 200 && ct.starts_with("text/event-stream");
    headers_.Add("Content-Type", std::move(ct));
  }

  // A data frame's bytes: handed out as they are, or for SSE up to the last complete
  // event (the rest held until its blank line, or flushed past the buffer bound).
  void TakeData(std::string data) {
    if (data.empty()) return;
    if (!sse_) {
      ready_.push_back(std::move(data));
      return;
    }
    const size_t cut = boundary_.Scan(data);
    if (cut == std::string_view::npos) {
      held_ += data;
      if (held_.size() > core_->options.max_buffered_bytes) {
        ready_.push_back(std::move(held_));
        held_.clear();
      }
      return;
    }
    held_.append(data, 0, cut);
    ready_.push_back(std::move(held_));
    held_.assign(data, cut);
  }

  // The next frame, or why none came: cancelled, a timeout, the buffer bound.
  http::Awaitable<absl::StatusOr<Frame>> NextFrame() {
    const int64_t idle_ms = core_->options.idle_timeout_ms;
    const SteadyTime idle_deadline =
        idle_ms > 0 ? SteadyClock::now() + std::chrono::milliseconds(idle_ms) : SteadyTime::max();
    for (;;) {
      if (cancelled_) co_return Fail(End::kCancelled, absl::CancelledError("cancelled"));
      std::optional<Frame> frame;
      bool overflow = false, dropped = false;
      {
        base::MutexLock lock(reply_->mu);
        overflow = reply_->overflow;
        dropped = reply_->dropped;
        if (!overflow && !dropped && !reply_->frames.empty()) {
          frame = std::move(reply_->frames.front());
          reply_->frames.pop_front();
          reply_->queued_bytes -= frame->data.size();
          core_->buffered_bytes.fetch_sub(static_cast<int64_t>(frame->data.size()));
        } else {
          reply_->waiting = true;
        }
      }
      if (overflow) {
        co_return Fail(End::kOverflow,
                       absl::ResourceExhaustedError(
                           "more than " + std::to_string(core_->options.max_buffered_bytes) +
                           " bytes of the answer waited for a slower reader"));
      }
      if (dropped) {
        co_return Fail(End::kDropped,
                       absl::DataLossError("reply frames were dropped: the router's NATS "
                                           "subscription fell behind"));
      }
      if (frame) co_return std::move(*frame);
      const SteadyTime now = SteadyClock::now();
      const SteadyTime until = std::min({idle_deadline, max_deadline_, request_deadline_});
      if (now >= until) {
        {
          base::MutexLock lock(reply_->mu);
          reply_->waiting = false;
        }
        if (now >= max_deadline_) {
          co_return Fail(End::kMaxDuration, ClientReadable(absl::DeadlineExceededError(
                                                "nats request exceeded total timeout " +
                                                Seconds(core_->options.max_duration_ms))));
        }
        if (now >= request_deadline_) {
          co_return Fail(End::kDeadline,
                         absl::DeadlineExceededError("no answer within the request timeout"));
        }
        co_return Fail(End::kIdleTimeout,
                       ClientReadable(absl::DeadlineExceededError(
                           "nats request stalled: no reply within " + Seconds(idle_ms) +
                           " (idle timeout)")));
      }
      reply_->timer.expires_at(until);
      boost::system::error_code ec;
      co_await reply_->timer.async_wait(http::NoThrow(ec));
      base::MutexLock lock(reply_->mu);
      reply_->waiting = false;
    }
  }

  std::shared_ptr<Core> core_;
  std::shared_ptr<Reply> reply_;
  const uint64_t id_;
  const std::string inbox_;
  const std::string worker_id_;
  const std::string cancel_subject_;
  const bool stream_;
  std::shared_ptr<http::Cancellation> cancel_;
  const SteadyTime request_deadline_;
  SteadyTime max_deadline_;

  int status_ = 0;
  http::Headers headers_;
  bool sse_ = false;
  transport::SseBoundary boundary_;
  std::deque<std::string> ready_;  // body pieces to hand out
  std::string held_;               // an SSE event not complete yet
  absl::Status failed_;
  End end_ = End::kCancelled;  // until a terminal frame or a failure says otherwise
  bool cancelled_ = false;
  bool finished_ = false;  // the worker sent done or error: nothing to cancel
  bool done_ = false;
  bool cancel_sent_ = false;
};

}  // namespace

NatsUpstream::NatsUpstream(NatsUpstreamOptions options, const core::Clock& clock)
    : clock_(clock), core_(std::make_shared<Core>(std::move(options))) {}

NatsUpstream::~NatsUpstream() { Stop(); }

absl::Status NatsUpstream::Start() {
  if (absl::Status s = core_->Start(); !s.ok()) return s;
  spdlog::info(
      "router: NATS request transport -> {} (idle timeout {}, max duration {}; workers whose "
      "record says request_transport nats)",
      core_->options.nats_url,
      core_->options.idle_timeout_ms > 0 ? Seconds(core_->options.idle_timeout_ms) : "off",
      core_->options.max_duration_ms > 0 ? Seconds(core_->options.max_duration_ms) : "off");
  return absl::OkStatus();
}

void NatsUpstream::Stop() { core_->Stop(); }

http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> NatsUpstream::Send(
    UpstreamRequest request) {
  if (!core_->connected()) {
    core_->Count(End::kNotConnected);
    co_return absl::UnavailableError("the NATS request transport is not connected to " +
                                     core_->options.nats_url);
  }
  if (request.cancel && request.cancel->cancelled()) co_return absl::CancelledError("cancelled");
  auto encoded =
      transport::EncodeRequest(request.method, request.path, request.headers, request.body);
  if (!encoded.ok()) {
    core_->Count(End::kBadRequest);
    co_return encoded.status();
  }
  SteadyTime deadline = SteadyTime::max();
  if (request.deadline_ns > 0) {
    deadline = SteadyClock::now() + std::chrono::nanoseconds(request.deadline_ns - clock_.NowNs());
  }
  const uint64_t id = core_->next_id.fetch_add(1, std::memory_order_relaxed);
  std::string inbox = core_->inbox_prefix + std::to_string(id);
  const std::string subject = transport::RequestSubject(request.worker_id);
  http::asio::any_io_executor executor = co_await http::asio::this_coro::executor;
  auto reply = core_->Register(id, std::move(executor));
  auto response =
      std::make_unique<NatsResponse>(core_, std::move(reply), id, inbox, request.worker_id,
                                     encoded->stream, std::move(request.cancel), deadline);
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subject.c_str(), inbox.c_str(), encoded->payload.data(),
                                static_cast<int>(encoded->payload.size()));
  if (s == NATS_OK) s = natsConnection_PublishMsg(core_->nc->conn(), msg);
  natsMsg_Destroy(msg);
  if (s != NATS_OK) {
    response->PublishFailed();
    co_return events::NatsError("publish to " + subject, s);
  }
  absl::Status head = co_await response->AwaitHead();
  if (!head.ok()) co_return head;
  co_return std::unique_ptr<UpstreamResponse>(std::move(response));
}

void NatsUpstream::RenderMetrics(std::string& out) const {
  const Core& c = *core_;
  RenderHeader(out, "infera_router_nats_requests_total", "counter",
               "Requests over the NATS request transport, by how they ended (ok, worker_error, "
               "no_responders, idle_timeout, max_duration, deadline, cancelled, overflow, "
               "dropped, not_connected, publish_error, bad_request).");
  for (size_t i = 0; i < kEndCount; ++i) {
    out += "infera_router_nats_requests_total{outcome=\"" + std::string(kEndNames[i]) + "\"} " +
           std::to_string(c.ends[i].load(std::memory_order_relaxed)) + "\n";
  }
  auto scalar = [&out](const char* name, const char* type, const char* help, int64_t value) {
    RenderHeader(out, name, type, help);
    out += std::string(name) + " " + std::to_string(value) + "\n";
  };
  scalar("infera_router_nats_requests_inflight", "gauge",
         "Requests over NATS waiting for, or reading, their reply.", c.inflight.load());
  scalar("infera_router_nats_buffered_bytes", "gauge",
         "Reply bytes received over NATS that their request's reader has not taken yet.",
         c.buffered_bytes.load());
  scalar("infera_router_nats_reply_bytes_total", "counter",
         "Reply payload bytes received over NATS.", static_cast<int64_t>(c.reply_bytes.load()));
  scalar("infera_router_nats_late_frames_total", "counter",
         "Reply frames for a request that had already ended (timed out, cancelled, failed).",
         static_cast<int64_t>(c.late_frames.load()));
  scalar("infera_router_nats_cancels_sent_total", "counter",
         "Cancel messages published to workers (each abandoned request: 3, 1 s apart).",
         static_cast<int64_t>(c.cancels_sent.load()));
  scalar("infera_router_nats_slow_consumer_total", "counter",
         "Times the reply subscription dropped messages (every request in flight then fails).",
         static_cast<int64_t>(c.slow_consumer.load()));
  scalar("infera_router_nats_connected", "gauge",
         "1 while the NATS request transport's connection is up.", c.connected() ? 1 : 0);
}

}  // namespace infera::router
