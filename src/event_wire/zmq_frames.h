// The frame helpers of vLLM's KV-event wire over ZMQ (doc/kv-events.md "Wire"):
// live messages [topic, seq (8-byte big-endian), payload]; replay requests
// ["", start seq]; replay answers ["", seq, payload], ended by seq -1.
//
// OpenMonitoredSub / ReadMonitor: a SUB socket with a monitor that tells when the
// connection dropped and came back (the ingestor and the relay judge the next seq by it,
// and probe the engine's replay socket at the reconnect).
//
// Thread-safety: functions over the caller's sockets and messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace infera::events {

inline constexpr uint64_t kReplayEndMarker = ~uint64_t{0};  // -1 as a signed 8-byte BE int

inline uint64_t ReadBE64(const zmq::message_t& m) {
  uint64_t v = 0;
  const auto* p = static_cast<const uint8_t*>(m.data());
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

inline std::string BE64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * (7 - i)));
  return s;
}

// Receives one whole multipart message without blocking; empty when none is queued.
inline std::vector<zmq::message_t> RecvMultipart(zmq::socket_t& s) {
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::dontwait)) return frames;
    const bool more = m.more();
    frames.push_back(std::move(m));
    if (!more) return frames;
  }
}

// Closes a monitored SUB: drains and stops its monitor first, then closes both.
// The order matters: libzmq's I/O thread sends monitor events with a blocking send;
// closed the other way round (or the reader first), the closing SUB's disconnect
// event blocks that thread forever, and with it every socket of the context: no more
// KV events from any worker, no new connection (found by the index soak, session 8:
// a worker leaving froze ingestion). Null sockets are skipped.
void CloseMonitoredSub(std::unique_ptr<zmq::socket_t>& sub,
                       std::unique_ptr<zmq::socket_t>& monitor);

struct MonitoredSub {
  std::unique_ptr<zmq::socket_t> sub;
  std::unique_ptr<zmq::socket_t> monitor;  // PAIR: connect/disconnect events of `sub`

  MonitoredSub() = default;
  MonitoredSub(MonitoredSub&&) = default;
  MonitoredSub& operator=(MonitoredSub&& other) noexcept {
    if (this != &other) {
      CloseMonitoredSub(sub, monitor);
      sub = std::move(other.sub);
      monitor = std::move(other.monitor);
    }
    return *this;
  }
  ~MonitoredSub() { CloseMonitoredSub(sub, monitor); }
};

struct SubOptions {
  std::string topic;  // subscription prefix; "" = every topic
  int receive_hwm = 100'000;
  int reconnect_ivl_ms = 100;
  int reconnect_ivl_max_ms = 5000;
};

// Connects a SUB to `endpoint` (ZMQ reconnects by itself). Throws zmq::error_t.
MonitoredSub OpenMonitoredSub(zmq::context_t& ctx, const std::string& endpoint,
                              const SubOptions& options);
// The monitor's queued events, read: whether one was a disconnect / a connect.
struct MonitorEvents {
  bool disconnected = false;
  bool connected = false;
  bool connected_last = false;  // the last of them was a connect: the peer is there now
};
MonitorEvents ReadMonitor(zmq::socket_t& monitor);

}  // namespace infera::events
