#include "engine_events/publisher.h"

#include <cerrno>
#include <chrono>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace infera::events {
namespace {

std::string SeqBytes(uint64_t seq) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(seq >> (8 * (7 - i)));
  return s;
}

constexpr uint64_t kEndMarker = ~uint64_t{0};  // -1 as a signed 8-byte big-endian int

}  // namespace

absl::StatusOr<std::unique_ptr<EventPublisher>> EventPublisher::Create(PublisherOptions options) {
  std::unique_ptr<EventPublisher> pub(new EventPublisher(std::move(options)));
  absl::Status s = pub->Start();
  if (!s.ok()) return s;
  return pub;
}

EventPublisher::EventPublisher(PublisherOptions options) : options_(std::move(options)), ctx_(1) {}

EventPublisher::~EventPublisher() {
  stop_.store(true);
  if (replay_thread_.joinable()) replay_thread_.join();
}

namespace {
// ZMQ spells "any free port" as "*"; accept the usual ":0" too.
std::string WildcardPort(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) == 0 && endpoint.size() > 2 &&
      endpoint.compare(endpoint.size() - 2, 2, ":0") == 0) {
    return endpoint.substr(0, endpoint.size() - 1) + "*";
  }
  return endpoint;
}
}  // namespace

absl::Status EventPublisher::Start() {
  if (options_.buffer_batches == 0) options_.buffer_batches = 1;
  try {
    pub_ = BindPub(WildcardPort(options_.pub_endpoint));
    pub_bound_ = pub_.get(zmq::sockopt::last_endpoint);
    if (!options_.replay_endpoint.empty()) {
      replay_ = zmq::socket_t(ctx_, zmq::socket_type::router);
      replay_.set(zmq::sockopt::linger, 0);
      // A ROUTER drops what exceeds its send HWM (default 1,000): a replay of more
      // batches would lose its tail and end marker (doc/perf-warm-restart.md).
      replay_.set(zmq::sockopt::sndhwm, options_.send_hwm);
      replay_.bind(WildcardPort(options_.replay_endpoint));
      replay_bound_ = replay_.get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("kv event publisher: cannot bind ",
                                               options_.pub_endpoint, " / ",
                                               options_.replay_endpoint, ": ", e.what()));
  }
  if (replay_) replay_thread_ = std::thread([this] { ReplayLoop(); });
  return absl::OkStatus();
}

zmq::socket_t EventPublisher::BindPub(const std::string& endpoint) {
  zmq::socket_t pub(ctx_, zmq::socket_type::pub);
  pub.set(zmq::sockopt::linger, 0);
  pub.set(zmq::sockopt::sndhwm, options_.send_hwm);
  pub.bind(endpoint);
  return pub;
}

bool EventPublisher::ReopenForTest(bool restart, const std::vector<std::string>& buffered) {
  base::MutexLock lock(mu_);
  pub_.close();
  if (restart) {
    next_seq_ = 0;
    buffer_.clear();
    for (const std::string& payload : buffered) {
      PublishLocked(std::make_shared<const std::string>(payload), /*send_live=*/false);
    }
  }
  // The old socket's listener closes asynchronously (libzmq's reaper): the address may
  // be busy for a moment.
  for (int attempt = 0; attempt < 2000; ++attempt) {
    try {
      pub_ = BindPub(pub_bound_);
      return true;
    } catch (const zmq::error_t& e) {
      if (e.num() != EADDRINUSE) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return false;
}

uint64_t EventPublisher::next_seq() const {
  base::MutexLock lock(mu_);
  return next_seq_;
}

uint64_t EventPublisher::Publish(const EventBatch& batch) {
  return PublishPayload(EncodeEventBatch(batch, options_.shape));
}

uint64_t EventPublisher::PublishPayload(std::string payload) {
  auto shared = std::make_shared<const std::string>(std::move(payload));
  base::MutexLock lock(mu_);
  return PublishLocked(std::move(shared), /*send_live=*/true);
}

uint64_t EventPublisher::PublishPayloadSkippingLive(std::string payload) {
  auto shared = std::make_shared<const std::string>(std::move(payload));
  base::MutexLock lock(mu_);
  return PublishLocked(std::move(shared), /*send_live=*/false);
}

bool EventPublisher::ResendForTest(uint64_t seq) {
  base::MutexLock lock(mu_);
  for (const auto& [s, payload] : buffer_) {
    if (s == seq) {
      SendLocked(s, *payload);
      return true;
    }
  }
  return false;
}

uint64_t EventPublisher::PublishLocked(std::shared_ptr<const std::string> payload, bool send_live) {
  const uint64_t seq = next_seq_++;
  if (send_live) SendLocked(seq, *payload);
  buffer_.emplace_back(seq, std::move(payload));
  while (buffer_.size() > options_.buffer_batches) buffer_.pop_front();
  return seq;
}

void EventPublisher::SendLocked(uint64_t seq, const std::string& payload) {
  const std::string seq_bytes = SeqBytes(seq);
  try {
    // PUB never blocks: past the high-water mark ZMQ drops the message, which a
    // subscriber sees as a gap and replays.
    pub_.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    pub_.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    pub_.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // Same as a drop at the high-water mark: the batch stays in the replay buffer.
  }
}

void EventPublisher::ReplayLoop() {
  while (!stop_.load()) {
    zmq::pollitem_t item{static_cast<void*>(replay_), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if (item.revents & ZMQ_POLLIN) ServeReplay();
    } catch (const zmq::error_t&) {
      // A failed request is the subscriber's to retry; keep serving.
    }
  }
}

void EventPublisher::ServeReplay() {
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t msg;
    if (!replay_.recv(msg, zmq::recv_flags::dontwait)) return;
    const bool more = msg.more();
    frames.push_back(std::move(msg));
    if (!more) break;
  }
  if (frames.size() != 3) return;  // [identity, empty, start_seq]; anything else ignored
  uint64_t start = 0;
  const auto* p = static_cast<const uint8_t*>(frames[2].data());
  for (size_t i = 0; i < frames[2].size() && i < 8; ++i) start = (start << 8) | p[i];

  std::vector<std::pair<uint64_t, std::shared_ptr<const std::string>>> batches;
  {
    base::MutexLock lock(mu_);
    for (const auto& entry : buffer_) {
      if (entry.first >= start) batches.push_back(entry);
    }
  }
  const std::string identity(static_cast<const char*>(frames[0].data()), frames[0].size());
  auto send = [&](uint64_t seq, const std::string& payload) {
    const std::string seq_bytes = SeqBytes(seq);
    replay_.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    replay_.send(zmq::message_t(), zmq::send_flags::sndmore);
    replay_.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
    replay_.send(zmq::buffer(payload), zmq::send_flags::none);
  };
  for (const auto& [seq, payload] : batches) send(seq, *payload);
  send(kEndMarker, std::string());
}

}  // namespace infera::events
