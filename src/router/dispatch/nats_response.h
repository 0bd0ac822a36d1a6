// NatsResponse: one request over NATS as an UpstreamResponse (nats_upstream.h): the
// head (AwaitHead, from NatsUpstream::Send), then the body (Read) from the frames its
// NatsReply queues (nats_inbox.h).
//
// An SSE answer is handed out in whole events (a piece ending mid-event is held until
// the event's blank line, up to max_buffered_bytes). Every wait for a frame is bounded
// by the idle timeout, the max duration and the request's deadline; a response
// abandoned before its done or error frame tells the worker to cancel. Its end is
// counted in NatsInbox::ends.
//
// Thread-safety: used on the loop that sent it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "router/dispatch/nats_inbox.h"
#include "router/dispatch/upstream.h"
#include "transport/nats_request_wire.h"

namespace infera::router {

class NatsResponse final : public UpstreamResponse {
 public:
  using SteadyTime = NatsInbox::SteadyTime;

  NatsResponse(std::shared_ptr<NatsInbox> inbox, std::shared_ptr<NatsReply> reply, uint64_t id,
               std::string inbox_subject, const std::string& worker_id, bool stream,
               std::shared_ptr<http::Cancellation> cancel, SteadyTime request_deadline);
  ~NatsResponse() override;

  int status() const override { return status_; }
  const http::Headers& headers() const override { return headers_; }

  // The publish failed: nothing reached the worker.
  void PublishFailed();
  // Waits for the answer's head (nats_upstream.h). Not OK: Send fails with it.
  http::Awaitable<absl::Status> AwaitHead();

  http::Awaitable<absl::StatusOr<std::optional<std::string>>> Read() override;
  http::Awaitable<absl::StatusOr<std::string>> ReadAll(uint64_t max_bytes) override;
  void Cancel() override;

 private:
  // A unary answer without rs-status (Infera's workers): the frames are held until
  // done brings the status.
  http::Awaitable<absl::Status> AwaitDone(std::string body);
  // The request's cancellation or Cancel(): a pending wait ends with Cancelled.
  void Interrupt();
  void SendCancelIfWorking();
  absl::Status Fail(NatsEnd end, absl::Status status);
  absl::Status WorkerError(std::string text);
  void Done();
  void SetHead(int status, const std::string& content_type);
  // A data frame's bytes: handed out as they are, or for SSE up to the last complete
  // event (the rest held until its blank line, or flushed past the buffer bound).
  void TakeData(std::string data);
  // The next frame, or why none came: cancelled, a timeout, the buffer bound.
  http::Awaitable<absl::StatusOr<NatsFrame>> NextFrame();
  // The first queued frame, or the overflow / dropped failure; nullopt (and the
  // reply marked waiting) when none is queued.
  std::optional<absl::StatusOr<NatsFrame>> TakeQueued();
  // The failure of a wait that reached `until` at `now` (max duration, the request's
  // deadline or the idle timeout).
  absl::Status TimedOut(SteadyTime now);

  std::shared_ptr<NatsInbox> inbox_;
  std::shared_ptr<NatsReply> reply_;
  const uint64_t id_;
  const std::string inbox_subject_;
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
  NatsEnd end_ = NatsEnd::kCancelled;  // until a terminal frame or a failure says otherwise
  bool cancelled_ = false;
  bool finished_ = false;  // the worker sent done or error: nothing to cancel
  bool done_ = false;
  bool cancel_sent_ = false;
};

}  // namespace infera::router
