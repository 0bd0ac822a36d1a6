#include "transport/nats_request_server.h"

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/mutex.h"
#include "event_wire/nats_connection.h"
#include "http/client.h"
#include "log/rate_limited_log.h"
#include "spdlog/spdlog.h"
#include "transport/nats_request_wire.h"

namespace infera::transport {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Room left in a message for its headers (rs-type, rs-status, rs-content-type).
constexpr int64_t kHeaderRoom = 4096;
// What an exchange may take without max duration (the HTTP client needs a deadline).
constexpr auto kNoDeadline = std::chrono::hours(24 * 365);
// How long Stop waits for cancelled exchanges to end.
constexpr int64_t kCancelWaitMs = 10'000;

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%gs", static_cast<double>(ms) / 1000.0);
  return buf;
}

// Why an exchange was cut from our side (the watchdog, the router's cancel).
enum class Cut : uint8_t { kNone, kIdle, kCancelled, kStopping };

}  // namespace

absl::Status ValidateNatsRequestServerOptions(const NatsRequestServerOptions& o) {
  if (o.worker_id.empty()) return absl::InvalidArgumentError("the NATS worker id is empty");
  if (absl::Status s = CheckTimeoutsMs(o.idle_timeout_ms, o.max_duration_ms); !s.ok()) return s;
  if (o.max_inflight == 0) return absl::InvalidArgumentError("max in-flight requests is 0");
  return absl::OkStatus();
}

struct NatsRequestServer::Core : std::enable_shared_from_this<Core> {
  Core(NatsRequestServerOptions o, http::IoPool& p)
      : options(std::move(o)),
        pool(p),
        subject(RequestSubject(options.worker_id)),
        cancel_subject(CancelSubject(options.worker_id)) {
    for (int i = 0; i < pool.size(); ++i) {
      clients.push_back(std::make_unique<http::Client>(pool.executor(i)));
    }
  }

  struct Inflight {
    http::asio::any_io_executor executor;
    std::shared_ptr<http::Cancellation> cancel;
    std::shared_ptr<Cut> cut;  // written on the exchange's loop only
  };

  absl::Status Start();
  void Stop(int64_t drain_timeout_ms);
  static void OnRequest(natsConnection*, natsSubscription*, natsMsg* msg, void* closure);
  static void OnCancel(natsConnection*, natsSubscription*, natsMsg* msg, void* closure);
  void Take(natsMsg* msg);
  // Cuts the exchange of `inbox` on its loop (nothing when it already ended).
  void CutExchange(const std::string& inbox, Cut why);
  void Ended(const std::string& inbox);
  http::Awaitable<void> Proxy(std::string inbox, DecodedRequest request, int loop,
                              std::shared_ptr<http::Cancellation> cancel, std::shared_ptr<Cut> cut);
  // One frame to `inbox`; false when it could not be published.
  bool Publish(const std::string& inbox, const char* type, std::string_view data,
               std::optional<int> status = std::nullopt, std::string_view content_type = {});
  void LogUp(const char* how);

  const NatsRequestServerOptions options;
  http::IoPool& pool;
  const std::string subject;
  const std::string cancel_subject;
  std::vector<std::unique_ptr<http::Client>> clients;  // one per loop, used on it
  std::unique_ptr<events::NatsConnection> nc;
  natsSubscription* request_sub = nullptr;
  natsSubscription* cancel_sub = nullptr;

  base::Mutex mu;
  base::CondVar ended_cv;
  absl::flat_hash_map<std::string, Inflight> inflight ABSL_GUARDED_BY(mu);  // by inbox
  bool accepting ABSL_GUARDED_BY(mu) = true;
  std::atomic<int64_t> next_warn_ns{0};
};

absl::Status NatsRequestServer::Core::Start() {
  events::NatsOptions nats;
  nats.url = options.nats_url;
  nats.name = "infera-worker-req";
  nats.on_reconnect = [this] { LogUp("(re)connected"); };
  auto connected_or = events::NatsConnection::Connect(std::move(nats));
  if (!connected_or.ok()) return connected_or.status();
  nc = *std::move(connected_or);
  natsStatus s =
      natsConnection_Subscribe(&request_sub, nc->conn(), subject.c_str(), &Core::OnRequest, this);
  if (s != NATS_OK) {
    request_sub = nullptr;
    return events::NatsError("subscribe " + subject, s);
  }
  s = natsConnection_Subscribe(&cancel_sub, nc->conn(), cancel_subject.c_str(), &Core::OnCancel,
                               this);
  if (s != NATS_OK) {
    cancel_sub = nullptr;
    return events::NatsError("subscribe " + cancel_subject, s);
  }
  if (nc->connected() &&
      natsConnection_FlushTimeout(nc->conn(), nc->request_timeout_ms()) == NATS_OK) {
    LogUp("connected");
  } else {
    spdlog::info("NATS request consumer: waiting for NATS at {} (subject={})", options.nats_url,
                 subject);
  }
  return absl::OkStatus();
}

void NatsRequestServer::Core::LogUp(const char* how) {
  spdlog::info("NATS request consumer up ({}): subject={} -> http://{}{} (worker {})", how, subject,
               options.engine.HostPort(), options.engine.base_path, options.worker_id);
}

void NatsRequestServer::Core::Stop(int64_t drain_timeout_ms) {
  {
    base::MutexLock lock(mu);
    if (!accepting && request_sub == nullptr && cancel_sub == nullptr) return;
    accepting = false;
  }
  const int64_t wait_ms = nc != nullptr ? nc->request_timeout_ms() : 0;
  if (request_sub != nullptr) events::DestroySubscription(request_sub, wait_ms);
  std::vector<std::string> left;
  {
    base::MutexLock lock(mu);
    ended_cv.WaitFor(mu, drain_timeout_ms,
                     [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return inflight.empty(); });
    for (const auto& [inbox, f] : inflight) left.push_back(inbox);
  }
  if (!left.empty()) {
    spdlog::info("NATS request consumer: cancelling {} request(s) still in flight", left.size());
  }
  for (const std::string& inbox : left) CutExchange(inbox, Cut::kStopping);
  {
    base::MutexLock lock(mu);
    if (!ended_cv.WaitFor(mu, kCancelWaitMs, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
          return inflight.empty();
        })) {
      spdlog::warn("NATS request consumer: {} request(s) did not end in time", inflight.size());
    }
  }
  if (cancel_sub != nullptr) events::DestroySubscription(cancel_sub, wait_ms);
}

void NatsRequestServer::Core::OnRequest(natsConnection*, natsSubscription*, natsMsg* msg,
                                        void* closure) {
  static_cast<Core*>(closure)->Take(msg);
}

void NatsRequestServer::Core::OnCancel(natsConnection*, natsSubscription*, natsMsg* msg,
                                       void* closure) {
  auto* self = static_cast<Core*>(closure);
  const std::string inbox(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
  natsMsg_Destroy(msg);
  self->CutExchange(inbox, Cut::kCancelled);
}

void NatsRequestServer::Core::CutExchange(const std::string& inbox, Cut why) {
  base::MutexLock lock(mu);
  auto it = inflight.find(inbox);
  if (it == inflight.end()) return;  // ended already, or another worker's (a resend)
  spdlog::debug("NATS request {}: cut ({})", inbox, why == Cut::kCancelled ? "cancel" : "stop");
  http::asio::post(it->second.executor, [cancel = it->second.cancel, cut = it->second.cut, why] {
    if (*cut == Cut::kNone) *cut = why;
    cancel->Cancel();
  });
}

void NatsRequestServer::Core::Ended(const std::string& inbox) {
  {
    base::MutexLock lock(mu);
    inflight.erase(inbox);
  }
  ended_cv.NotifyAll();
}

bool NatsRequestServer::Core::Publish(const std::string& inbox, const char* type,
                                      std::string_view data, std::optional<int> status,
                                      std::string_view content_type) {
  natsMsg* msg = nullptr;
  natsStatus s =
      natsMsg_Create(&msg, inbox.c_str(), nullptr, data.data(), static_cast<int>(data.size()));
  if (s == NATS_OK) s = natsMsgHeader_Set(msg, kTypeHeader, type);
  if (s == NATS_OK && status) {
    s = natsMsgHeader_Set(msg, kStatusHeader, std::to_string(*status).c_str());
  }
  if (s == NATS_OK && !content_type.empty()) {
    s = natsMsgHeader_Set(msg, kContentTypeHeader, std::string(content_type).c_str());
  }
  if (s == NATS_OK) s = natsConnection_PublishMsg(nc->conn(), msg);
  natsMsg_Destroy(msg);
  if (s != NATS_OK) spdlog::warn("NATS request {}: publish: {}", inbox, natsStatus_GetText(s));
  return s == NATS_OK;
}

void NatsRequestServer::Core::Take(natsMsg* msg) {
  // Infera's JetStream mode carries the inbox in a header (reply is the ack subject).
  const char* header_inbox = nullptr;
  if (natsMsgHeader_Get(msg, kInboxHeader, &header_inbox) != NATS_OK) header_inbox = nullptr;
  const char* reply = natsMsg_GetReply(msg);
  std::string inbox = header_inbox != nullptr ? header_inbox : reply != nullptr ? reply : "";
  auto decoded = DecodeRequest(
      std::string_view(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg))));
  natsMsg_Destroy(msg);
  auto warn = [this](const std::string& text) {  // at most one line a second
    const int64_t now = SteadyClock::now().time_since_epoch().count();
    int64_t next = next_warn_ns.load();
    if (now >= next && next_warn_ns.compare_exchange_strong(next, now + 1'000'000'000)) {
      spdlog::warn("NATS request consumer: {}", text);
    }
  };
  if (inbox.empty()) {
    warn("a request without a reply inbox: dropped");
    return;
  }
  if (!decoded.ok()) {
    warn("bad request: " + std::string(decoded.status().message()));
    Publish(inbox, kTypeError, "bad request: " + std::string(decoded.status().message()));
    return;
  }
  int loop = 0;
  auto cancel = std::make_shared<http::Cancellation>();
  auto cut = std::make_shared<Cut>(Cut::kNone);
  {
    base::MutexLock lock(mu);
    if (!accepting) {
      Publish(inbox, kTypeError, "infera: worker stopping");
      return;
    }
    if (inflight.size() >= options.max_inflight) {
      Publish(inbox, kTypeError,
              "too many requests in flight on this worker (" +
                  std::to_string(options.max_inflight) + ")");
      return;
    }
    loop = pool.NextIndex();
    if (!inflight.emplace(inbox, Inflight{pool.executor(loop), cancel, cut}).second) return;
  }
  http::asio::co_spawn(pool.executor(loop), Proxy(inbox, *std::move(decoded), loop, cancel, cut),
                       [self = shared_from_this(), inbox](std::exception_ptr e) {
                         if (e) {
                           try {
                             std::rethrow_exception(e);
                           } catch (const std::exception& ex) {
                             spdlog::error("NATS request {}: {}", inbox, ex.what());
                           }
                           self->Publish(inbox, kTypeError, "internal error");
                         }
                         self->Ended(inbox);
                       });
}

http::Awaitable<void> NatsRequestServer::Core::Proxy(std::string inbox, DecodedRequest request,
                                                     int loop,
                                                     std::shared_ptr<http::Cancellation> cancel,
                                                     std::shared_ptr<Cut> cut) {
  http::Client& client = *clients[static_cast<size_t>(loop)];
  // The idle watchdog: re-armed before each wait on the engine; firing cuts it.
  http::asio::any_io_executor executor = co_await http::asio::this_coro::executor;
  auto watchdog = std::make_shared<http::asio::steady_timer>(executor);
  const int64_t idle_ms = options.idle_timeout_ms;
  auto arm = [&] {
    if (idle_ms <= 0) return;
    watchdog->expires_after(std::chrono::milliseconds(idle_ms));
    watchdog->async_wait([cancel, cut](const boost::system::error_code& ec) {
      if (ec) return;
      if (*cut == Cut::kNone) *cut = Cut::kIdle;
      cancel->Cancel();
    });
  };
  // The engine's failure as the error frame's text (Infera's wording where it has one).
  auto failure = [&](const absl::Status& s) -> std::string {
    switch (*cut) {
      case Cut::kIdle:
        return "engine stalled: no reply within " + Seconds(idle_ms) + " (idle timeout)";
      case Cut::kCancelled:
        return "request cancelled";
      case Cut::kStopping:
        return "infera: worker stopping";
      case Cut::kNone:
        break;
    }
    if (s.code() == absl::StatusCode::kDeadlineExceeded) return "request exceeded max duration";
    // The frame reaches clients: the engine's address and the transport detail stay
    // in this log.
    static log::RateLimitedLog limited;  // (one line per failed request at most)
    limited.Warn("nats request server: engine failed", "nats request server: engine {}: {}",
                 options.engine.HostPort(), std::string(s.message()));
    return s.code() == absl::StatusCode::kDataLoss ? "engine sent a malformed answer"
                                                   : "engine connection failed";
  };
  const http::Deadline deadline =
      SteadyClock::now() + (options.max_duration_ms > 0
                                ? std::chrono::duration_cast<SteadyClock::duration>(
                                      std::chrono::milliseconds(options.max_duration_ms))
                                : std::chrono::duration_cast<SteadyClock::duration>(kNoDeadline));
  http::Headers headers = std::move(request.headers);
  std::string body;
  if (request.method == "POST") {
    headers.Add("Content-Type", "application/json");
    body = std::move(request.body);
  }
  arm();
  auto sent = co_await client.Send(options.engine, request.method, request.path, std::move(headers),
                                   std::move(body), deadline, cancel);
  if (!sent.ok()) {
    watchdog->cancel();
    Publish(inbox, kTypeError, failure(sent.status()));
    co_return;
  }
  http::ClientStream& stream = **sent;
  const int status = stream.status();
  const std::string content_type(stream.headers().Get("Content-Type"));
  const int64_t max_payload = natsConnection_GetMaxPayload(nc->conn());
  const size_t frame_bytes =
      static_cast<size_t>(max_payload > 2 * kHeaderRoom ? max_payload - kHeaderRoom : kHeaderRoom);
  bool first = true;
  for (;;) {
    arm();
    auto piece = co_await stream.Read();
    if (!piece.ok()) {
      Publish(inbox, kTypeError, failure(piece.status()));
      break;
    }
    if (!piece->has_value()) {
      Publish(inbox, kTypeDone, {}, status, first ? std::string_view(content_type) : "");
      break;
    }
    const std::string& bytes = **piece;
    bool published = true;
    for (size_t at = 0; at < bytes.size() && published; at += frame_bytes) {
      const std::string_view part = std::string_view(bytes).substr(at, frame_bytes);
      published = first ? Publish(inbox, kTypeData, part, status, content_type)
                        : Publish(inbox, kTypeData, part);
      first = false;
    }
    if (!published) {  // nobody can hear the rest: stop the engine
      stream.Cancel();
      break;
    }
  }
  watchdog->cancel();
}

NatsRequestServer::NatsRequestServer(NatsRequestServerOptions options, http::IoPool& pool)
    : core_(std::make_shared<Core>(std::move(options), pool)) {}

NatsRequestServer::~NatsRequestServer() { Stop(0); }

absl::Status NatsRequestServer::Start() { return core_->Start(); }

void NatsRequestServer::Stop(int64_t drain_timeout_ms) { core_->Stop(drain_timeout_ms); }

const std::string& NatsRequestServer::subject() const { return core_->subject; }

}  // namespace infera::transport
