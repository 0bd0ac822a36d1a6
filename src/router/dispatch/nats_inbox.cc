#include "router/dispatch/nats_inbox.h"

#include <charconv>
#include <cstdio>
#include <vector>

#include "transport/nats_request_wire.h"

namespace infera::router {
namespace {

using SteadyClock = std::chrono::steady_clock;
using transport::FrameType;

// The reply inboxes' subscription: what libnats may hold before its callback takes the
// messages (the callback only moves them to their request, so this stays near 0).
constexpr int kSubPendingBytes = 256 << 20;

const char* HeaderOf(natsMsg* msg, const char* key) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, key, &value) != NATS_OK) return nullptr;
  return value;
}

// The frame `msg` carries (its bytes copied out: the message is destroyed after).
NatsFrame FrameOf(natsMsg* msg) {
  NatsFrame frame;
  if (natsMsg_IsNoResponders(msg)) {
    frame.kind = NatsFrame::Kind::kNoResponders;
    return frame;
  }
  switch (transport::ParseFrameType(HeaderOf(msg, transport::kTypeHeader))) {
    case FrameType::kData:
      frame.kind = NatsFrame::Kind::kData;
      break;
    case FrameType::kDone:
      frame.kind = NatsFrame::Kind::kDone;
      break;
    case FrameType::kError:
      frame.kind = NatsFrame::Kind::kError;
      break;
  }
  frame.status = transport::ParseStatus(HeaderOf(msg, transport::kStatusHeader));
  if (const char* ct = HeaderOf(msg, transport::kContentTypeHeader)) frame.content_type = ct;
  frame.data.assign(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
  return frame;
}

}  // namespace

std::string NatsSeconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%gs", static_cast<double>(ms) / 1000.0);
  return buf;
}

absl::Status NatsInbox::Start() {
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
  s = natsConnection_Subscribe(&sub, nc->conn(), subject.c_str(), &NatsInbox::OnMessage, this);
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

void NatsInbox::Stop() {
  {
    base::MutexLock lock(cancel_mu);
    stopping = true;
  }
  cancel_cv.NotifyAll();
  if (cancel_thread.joinable()) cancel_thread.join();
  if (sub != nullptr && nc != nullptr) events::DestroySubscription(sub, nc->request_timeout_ms());
}

std::shared_ptr<NatsReply> NatsInbox::Register(uint64_t id, http::asio::any_io_executor executor) {
  auto reply = std::make_shared<NatsReply>(std::move(executor));
  base::MutexLock lock(mu);
  replies.emplace(id, reply);
  return reply;
}

void NatsInbox::Unregister(uint64_t id, NatsReply& reply) {
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

void NatsInbox::OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  static_cast<NatsInbox*>(closure)->Deliver(msg);
}

void NatsInbox::Wake(const std::shared_ptr<NatsReply>& reply) {
  http::asio::post(reply->timer.get_executor(), [reply] { reply->timer.cancel(); });
}

std::shared_ptr<NatsReply> NatsInbox::ReplyOf(natsMsg* msg) {
  const std::string_view subject = natsMsg_GetSubject(msg);
  if (subject.size() <= inbox_prefix.size()) return nullptr;
  const char* first = subject.data() + inbox_prefix.size();
  const char* last = subject.data() + subject.size();
  uint64_t id = 0;
  auto [p, ec] = std::from_chars(first, last, id);
  if (ec != std::errc() || p != last) return nullptr;
  base::MutexLock lock(mu);
  auto it = replies.find(id);
  return it != replies.end() ? it->second : nullptr;
}

void NatsInbox::Deliver(natsMsg* msg) {
  std::shared_ptr<NatsReply> reply = ReplyOf(msg);
  if (reply == nullptr) {  // a request that already ended (a timeout, a cancel)
    late_frames.fetch_add(1, std::memory_order_relaxed);
    natsMsg_Destroy(msg);
    return;
  }
  NatsFrame frame = FrameOf(msg);
  natsMsg_Destroy(msg);
  reply_bytes.fetch_add(frame.data.size(), std::memory_order_relaxed);
  if (Enqueue(*reply, std::move(frame))) Wake(reply);
}

bool NatsInbox::Enqueue(NatsReply& reply, NatsFrame frame) {
  const uint64_t size = frame.data.size();
  base::MutexLock lock(reply.mu);
  if (reply.closed) {
    late_frames.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (reply.queued_bytes + size > options.max_buffered_bytes) {
    // The reader (the client) is slower than the worker: fail the request rather
    // than hold an unbounded answer; the reader tells the worker to cancel.
    reply.overflow = true;
    reply.closed = true;
    buffered_bytes.fetch_sub(static_cast<int64_t>(reply.queued_bytes));
    reply.queued_bytes = 0;
    reply.frames.clear();
  } else {
    reply.queued_bytes += size;
    buffered_bytes.fetch_add(static_cast<int64_t>(size));
    reply.closed = frame.kind != NatsFrame::Kind::kData;
    reply.frames.push_back(std::move(frame));
  }
  const bool wake = reply.waiting;
  reply.waiting = false;
  return wake;
}

void NatsInbox::OnAsyncError(natsSubscription* s, natsStatus status) {
  if (s != sub || status != NATS_SLOW_CONSUMER) return;
  // Some reply lost frames and which one is unknown: every request in flight fails
  // rather than relay an answer with a hole in it.
  slow_consumer.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::shared_ptr<NatsReply>> all;
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

void NatsInbox::SendCancel(const std::string& subject, const std::string& inbox) {
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

void NatsInbox::RunResends() {
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

}  // namespace infera::router
