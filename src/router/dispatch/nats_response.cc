#include "router/dispatch/nats_response.h"

#include <algorithm>
#include <chrono>

namespace infera::router {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr size_t kMaxErrorText = 500;

std::string TrimErrorText(std::string text) {
  if (text.size() > kMaxErrorText) text.resize(kMaxErrorText);
  return text;
}

}  // namespace

NatsResponse::NatsResponse(std::shared_ptr<NatsInbox> inbox, std::shared_ptr<NatsReply> reply,
                           uint64_t id, std::string inbox_subject, const std::string& worker_id,
                           bool stream, std::shared_ptr<http::Cancellation> cancel,
                           SteadyTime request_deadline)
    : inbox_(std::move(inbox)),
      reply_(std::move(reply)),
      id_(id),
      inbox_subject_(std::move(inbox_subject)),
      worker_id_(worker_id),
      cancel_subject_(transport::CancelSubject(worker_id)),
      stream_(stream),
      cancel_(std::move(cancel)),
      request_deadline_(request_deadline) {
  const SteadyTime now = SteadyClock::now();
  max_deadline_ = inbox_->options.max_duration_ms > 0
                      ? now + std::chrono::milliseconds(inbox_->options.max_duration_ms)
                      : SteadyTime::max();
  inbox_->inflight.fetch_add(1, std::memory_order_relaxed);
  if (cancel_) cancel_->Bind([this] { Interrupt(); });
}

NatsResponse::~NatsResponse() {
  if (cancel_) cancel_->Unbind();
  SendCancelIfWorking();
  inbox_->Unregister(id_, *reply_);
  inbox_->Count(end_);
  inbox_->inflight.fetch_sub(1, std::memory_order_relaxed);
}

void NatsResponse::PublishFailed() {
  finished_ = true;
  end_ = NatsEnd::kPublishError;
}

http::Awaitable<absl::Status> NatsResponse::AwaitHead() {
  auto first = co_await NextFrame();
  if (!first.ok()) co_return first.status();
  switch (first->kind) {
    case NatsFrame::Kind::kNoResponders:
      finished_ = true;
      end_ = NatsEnd::kNoResponders;
      co_return WithClientMessage(
          absl::UnavailableError("no responders on " + transport::RequestSubject(worker_id_) +
                                 " (nobody serves the worker's NATS subject)"),
          "no responders on its NATS subject");
    case NatsFrame::Kind::kError:
      co_return WorkerError(std::move(first->data));
    case NatsFrame::Kind::kDone:
      SetHead(first->status.value_or(200), first->content_type);
      Done();
      co_return absl::OkStatus();
    case NatsFrame::Kind::kData:
      break;
  }
  if (first->status || stream_) {
    SetHead(first->status.value_or(200), first->content_type);
    TakeData(std::move(first->data));
    co_return absl::OkStatus();
  }
  co_return co_await AwaitDone(std::move(first->data));
}

http::Awaitable<absl::Status> NatsResponse::AwaitDone(std::string body) {
  for (;;) {
    auto next = co_await NextFrame();
    if (!next.ok()) co_return next.status();
    if (next->kind == NatsFrame::Kind::kData) {
      body += next->data;
      if (body.size() > inbox_->options.max_buffered_bytes) {
        co_return Fail(NatsEnd::kOverflow, absl::ResourceExhaustedError(
                                               "the answer is over " +
                                               std::to_string(inbox_->options.max_buffered_bytes) +
                                               " bytes before its status arrived"));
      }
      continue;
    }
    if (next->kind == NatsFrame::Kind::kDone) {
      SetHead(next->status.value_or(200), next->content_type);
      TakeData(std::move(body));
      Done();
      co_return absl::OkStatus();
    }
    co_return WorkerError(std::move(next->data));
  }
}

http::Awaitable<absl::StatusOr<std::optional<std::string>>> NatsResponse::Read() {
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
      case NatsFrame::Kind::kData:
        TakeData(std::move(frame->data));
        break;
      case NatsFrame::Kind::kDone:
        Done();
        break;
      case NatsFrame::Kind::kError:
      case NatsFrame::Kind::kNoResponders:
        co_return WorkerError(std::move(frame->data));
    }
  }
}

http::Awaitable<absl::StatusOr<std::string>> NatsResponse::ReadAll(uint64_t max_bytes) {
  std::string all;
  for (;;) {
    auto piece = co_await Read();
    if (!piece.ok()) co_return piece.status();
    if (!piece->has_value()) co_return all;
    all += **piece;
    if (all.size() > max_bytes) {
      co_return absl::ResourceExhaustedError("answer over " + std::to_string(max_bytes) + " bytes");
    }
  }
}

void NatsResponse::Cancel() {
  Interrupt();
  SendCancelIfWorking();
}

void NatsResponse::Interrupt() {
  if (cancelled_) return;
  cancelled_ = true;
  reply_->timer.cancel();
}

void NatsResponse::SendCancelIfWorking() {
  if (finished_ || cancel_sent_) return;
  cancel_sent_ = true;
  inbox_->SendCancel(cancel_subject_, inbox_subject_);
}

absl::Status NatsResponse::Fail(NatsEnd end, absl::Status status) {
  end_ = end;
  failed_ = status;
  held_.clear();  // never hand out half an event after a failure
  return status;
}

absl::Status NatsResponse::WorkerError(std::string text) {
  finished_ = true;
  // (The worker's own error text, as a worker's 5xx message is relayed.)
  return Fail(NatsEnd::kWorkerError,
              ClientReadable(absl::UnavailableError("error frame: " + TrimErrorText(text))));
}

void NatsResponse::Done() {
  finished_ = true;
  done_ = true;
  end_ = NatsEnd::kOk;
}

void NatsResponse::SetHead(int status, const std::string& content_type) {
  status_ = status;
  std::string ct = content_type;
  if (ct.empty()) ct = status == 200 && stream_ ? "text/event-stream" : "application/json";
  sse_ = status == 200 && ct.starts_with("text/event-stream");
  headers_.Add("Content-Type", std::move(ct));
}

void NatsResponse::TakeData(std::string data) {
  if (data.empty()) return;
  if (!sse_) {
    ready_.push_back(std::move(data));
    return;
  }
  const size_t cut = boundary_.Scan(data);
  if (cut == std::string_view::npos) {
    held_ += data;
    if (held_.size() > inbox_->options.max_buffered_bytes) {
      ready_.push_back(std::move(held_));
      held_.clear();
    }
    return;
  }
  held_.append(data, 0, cut);
  ready_.push_back(std::move(held_));
  held_.assign(data, cut);
}

std::optional<absl::StatusOr<NatsFrame>> NatsResponse::TakeQueued() {
  base::MutexLock lock(reply_->mu);
  if (reply_->overflow) {
    return Fail(NatsEnd::kOverflow,
                absl::ResourceExhaustedError("more than " +
                                             std::to_string(inbox_->options.max_buffered_bytes) +
                                             " bytes of the answer waited for a slower reader"));
  }
  if (reply_->dropped) {
    return Fail(NatsEnd::kDropped, absl::DataLossError("reply frames were dropped: the router's "
                                                       "NATS subscription fell behind"));
  }
  if (reply_->frames.empty()) {
    reply_->waiting = true;
    return std::nullopt;
  }
  NatsFrame frame = std::move(reply_->frames.front());
  reply_->frames.pop_front();
  reply_->queued_bytes -= frame.data.size();
  inbox_->buffered_bytes.fetch_sub(static_cast<int64_t>(frame.data.size()));
  return frame;
}

absl::Status NatsResponse::TimedOut(SteadyTime now) {
  if (now >= max_deadline_) {
    return Fail(
        NatsEnd::kMaxDuration,
        ClientReadable(absl::DeadlineExceededError("nats request exceeded total timeout " +
                                                   NatsSeconds(inbox_->options.max_duration_ms))));
  }
  if (now >= request_deadline_) {
    return Fail(NatsEnd::kDeadline,
                absl::DeadlineExceededError("no answer within the request timeout"));
  }
  return Fail(NatsEnd::kIdleTimeout,
              ClientReadable(absl::DeadlineExceededError(
                  "nats request stalled: no reply within " +
                  NatsSeconds(inbox_->options.idle_timeout_ms) + " (idle timeout)")));
}

http::Awaitable<absl::StatusOr<NatsFrame>> NatsResponse::NextFrame() {
  const int64_t idle_ms = inbox_->options.idle_timeout_ms;
  const SteadyTime idle_deadline =
      idle_ms > 0 ? SteadyClock::now() + std::chrono::milliseconds(idle_ms) : SteadyTime::max();
  for (;;) {
    if (cancelled_) co_return Fail(NatsEnd::kCancelled, absl::CancelledError("cancelled"));
    if (std::optional<absl::StatusOr<NatsFrame>> queued = TakeQueued()) {
      co_return std::move(*queued);
    }
    const SteadyTime now = SteadyClock::now();
    const SteadyTime until = std::min({idle_deadline, max_deadline_, request_deadline_});
    if (now >= until) {
      {
        base::MutexLock lock(reply_->mu);
        reply_->waiting = false;
      }
      co_return TimedOut(now);
    }
    reply_->timer.expires_at(until);
    boost::system::error_code ec;
    co_await reply_->timer.async_wait(http::NoThrow(ec));
    base::MutexLock lock(reply_->mu);
    reply_->waiting = false;
  }
}

}  // namespace infera::router
