#include "router/dispatch/nats_upstream.h"

#include <chrono>

#include "router/dispatch/nats_inbox.h"
#include "router/dispatch/nats_response.h"
#include "router/metrics/metrics.h"
#include "spdlog/spdlog.h"
#include "transport/nats_request_wire.h"

namespace infera::router {

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

NatsUpstream::NatsUpstream(NatsUpstreamOptions options, const core::Clock& clock)
    : clock_(clock), inbox_(std::make_shared<NatsInbox>(std::move(options))) {}

NatsUpstream::~NatsUpstream() { Stop(); }

absl::Status NatsUpstream::Start() {
  if (absl::Status s = inbox_->Start(); !s.ok()) return s;
  spdlog::info(
      "router: NATS request transport -> {} (idle timeout {}, max duration {}; workers whose "
      "record says request_transport nats)",
      inbox_->options.nats_url,
      inbox_->options.idle_timeout_ms > 0 ? NatsSeconds(inbox_->options.idle_timeout_ms) : "off",
      inbox_->options.max_duration_ms > 0 ? NatsSeconds(inbox_->options.max_duration_ms) : "off");
  return absl::OkStatus();
}

void NatsUpstream::Stop() { inbox_->Stop(); }

http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> NatsUpstream::Send(
    UpstreamRequest request) {
  if (!inbox_->connected()) {
    inbox_->Count(NatsEnd::kNotConnected);
    co_return absl::UnavailableError("the NATS request transport is not connected to " +
                                     inbox_->options.nats_url);
  }
  if (request.cancel && request.cancel->cancelled()) co_return absl::CancelledError("cancelled");
  auto encoded =
      transport::EncodeRequest(request.method, request.path, request.headers, request.body);
  if (!encoded.ok()) {
    inbox_->Count(NatsEnd::kBadRequest);
    co_return encoded.status();
  }
  NatsInbox::SteadyTime deadline = NatsInbox::SteadyTime::max();
  if (request.deadline_ns > 0) {
    deadline = std::chrono::steady_clock::now() +
               std::chrono::nanoseconds(request.deadline_ns - clock_.NowNs());
  }
  const uint64_t id = inbox_->next_id.fetch_add(1, std::memory_order_relaxed);
  std::string inbox = inbox_->inbox_prefix + std::to_string(id);
  const std::string subject = transport::RequestSubject(request.worker_id);
  http::asio::any_io_executor executor = co_await http::asio::this_coro::executor;
  auto reply = inbox_->Register(id, std::move(executor));
  auto response =
      std::make_unique<NatsResponse>(inbox_, std::move(reply), id, inbox, request.worker_id,
                                     encoded->stream, std::move(request.cancel), deadline);
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subject.c_str(), inbox.c_str(), encoded->payload.data(),
                                static_cast<int>(encoded->payload.size()));
  if (s == NATS_OK) s = natsConnection_PublishMsg(inbox_->nc->conn(), msg);
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
  const NatsInbox& c = *inbox_;
  RenderHeader(out, "infera_router_nats_requests_total", "counter",
               "Requests over the NATS request transport, by how they ended (ok, worker_error, "
               "no_responders, idle_timeout, max_duration, deadline, cancelled, overflow, "
               "dropped, not_connected, publish_error, bad_request).");
  for (size_t i = 0; i < kNatsEndCount; ++i) {
    out += "infera_router_nats_requests_total{outcome=\"" + std::string(kNatsEndNames[i]) + "\"} " +
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
