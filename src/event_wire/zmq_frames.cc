#include "event_wire/zmq_frames.h"

#include <atomic>

namespace infera::events {
namespace {

std::atomic<uint64_t> next_monitor_id{0};

}  // namespace

MonitoredSub OpenMonitoredSub(zmq::context_t& ctx, const std::string& endpoint,
                              const SubOptions& options) {
  MonitoredSub m;
  m.sub = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::sub);
  m.sub->set(zmq::sockopt::linger, 0);
  m.sub->set(zmq::sockopt::rcvhwm, options.receive_hwm);
  m.sub->set(zmq::sockopt::reconnect_ivl, options.reconnect_ivl_ms);
  m.sub->set(zmq::sockopt::reconnect_ivl_max, options.reconnect_ivl_max_ms);
  m.sub->set(zmq::sockopt::subscribe, options.topic);
  const std::string monitor_addr =
      "inproc://infera-kv-monitor-" + std::to_string(next_monitor_id.fetch_add(1));
  if (zmq_socket_monitor(m.sub->handle(), monitor_addr.c_str(),
                         ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    throw zmq::error_t();
  }
  m.monitor = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
  m.monitor->set(zmq::sockopt::linger, 0);
  m.monitor->connect(monitor_addr);
  m.sub->connect(endpoint);
  return m;
}

void CloseMonitoredSub(std::unique_ptr<zmq::socket_t>& sub,
                       std::unique_ptr<zmq::socket_t>& monitor) {
  if (sub != nullptr) {
    if (monitor != nullptr) {
      // Whatever the I/O thread already queued: its sends must not be blocked when
      // the monitor stops (the stop waits for the monitor's lock).
      for (int i = 0; i < 4096 && !RecvMultipart(*monitor).empty(); ++i) {
      }
    }
    zmq_socket_monitor(sub->handle(), nullptr, 0);  // no more events from now on
    sub.reset();
  }
  monitor.reset();
}

MonitorEvents ReadMonitor(zmq::socket_t& monitor) {
  MonitorEvents out;
  for (int i = 0; i < 64; ++i) {
    std::vector<zmq::message_t> frames = RecvMultipart(monitor);
    if (frames.empty()) break;
    if (frames[0].size() < 2) continue;
    const auto* p = static_cast<const uint8_t*>(frames[0].data());
    const uint16_t event = static_cast<uint16_t>(p[0] | (p[1] << 8));  // host order (LE)
    if (event == ZMQ_EVENT_DISCONNECTED) {
      out.disconnected = true;
      out.connected_last = false;
    }
    if (event == ZMQ_EVENT_CONNECTED) out.connected = out.connected_last = true;
  }
  return out;
}

}  // namespace infera::events
