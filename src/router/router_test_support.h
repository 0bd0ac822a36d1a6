// In-process router tests' helpers: a test clock, a raw HTTP/1.1 client and the
// router started on a fake upstream, worker records (router_pipeline_test.cc,
// session_routing_test.cc, pd_dispatcher_test.cc, decode_demand_router_test.cc).
//
// Thread-safety: TestClock is readable from any thread; TestClient is one thread's.
#pragma once

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/clock.h"
#include "testing/test_clock.h"
#include "http/asio.h"
#include "http/headers.h"
#include "router/dispatch/fake_upstream.h"
#include "router/router.h"
#include "testing/wait_for.h"

namespace infera::testing {

namespace asio = http::asio;
using tcp = asio::ip::tcp;

// A clock the test moves; readable from the router's loops.
using TestClock = SharedManualClock;

struct Answer {
  int status = 0;
  http::Headers headers;
  std::string body;  // de-chunked
};

// One HTTP/1.1 exchange with Connection: close; reads until the server closes.
class TestClient {
 public:
  explicit TestClient(uint16_t port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  void Write(const std::string& method, const std::string& path, const std::string& body,
             const std::string& extra_headers = "") {
    std::string req =
        method + " " + path + " HTTP/1.1\r\nHost: router\r\nConnection: close\r\n" +
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n" + extra_headers + "\r\n" + body;
    asio::write(socket_, asio::buffer(req));
  }
  // Reads until `needle` appeared in the raw bytes (or the server closed).
  std::string ReadUntil(const std::string& needle) {
    char buf[4096];
    boost::system::error_code ec;
    while (raw_.find(needle) == std::string::npos) {
      size_t n = socket_.read_some(asio::buffer(buf), ec);
      if (ec) break;
      raw_.append(buf, n);
    }
    return raw_;
  }
  Answer ReadAnswer() {
    ReadUntil("\x01never");
    Answer a;
    size_t head_end = raw_.find("\r\n\r\n");
    if (head_end == std::string::npos) return a;
    std::string head = raw_.substr(0, head_end);
    a.status = std::atoi(head.c_str() + 9);
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos && pos < head.size()) {
      size_t next = head.find("\r\n", pos + 2);
      std::string line =
          head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        a.headers.Add(line.substr(0, colon), line.substr(colon + 2));
      }
      pos = next;
    }
    std::string body = raw_.substr(head_end + 4);
    if (a.headers.Get("Transfer-Encoding") == "chunked") {
      size_t p = 0;
      while (p < body.size()) {
        size_t eol = body.find("\r\n", p);
        if (eol == std::string::npos) break;
        size_t len = std::stoul(body.substr(p, eol - p), nullptr, 16);
        if (len == 0) break;
        a.body += body.substr(eol + 2, len);
        p = eol + 2 + len + 2;
      }
    } else {
      a.body = body;
    }
    return a;
  }
  // Resets the connection (RST), as a client that crashed.
  void Abort() {
    socket_.set_option(asio::socket_base::linger(true, 0));
    socket_.close();
  }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  std::string raw_;
};

// The whole router in-process: one loop on 127.0.0.1 port 0, no KV events, `clock`,
// `seed`, and a FakeUpstream for the workers (set in *fake). Null if it did not start.
inline std::unique_ptr<router::Router> StartTestRouter(router::RouterOptions opt,
                                                       const core::Clock& clock, uint64_t seed,
                                                       router::FakeUpstream** fake) {
  opt.threads = 1;
  opt.server.host = "127.0.0.1";
  opt.server.port = 0;
  // No ZMQ in process: the fixture stands for a fleet whose engines have published
  // nothing yet (tests write views into the index themselves), so not approximate
  // mode (--kv-event-transport none's default; sim_approx_mode_test covers it).
  opt.kv_events = false;
  opt.approx.ttl_ns = 0;
  router::RouterEnv env;
  env.clock = &clock;
  env.seed = seed;
  env.upstream = [fake](http::IoPool&, const core::Clock& c) {
    auto upstream = std::make_unique<router::FakeUpstream>(c);
    *fake = upstream.get();
    return std::unique_ptr<router::Upstream>(std::move(upstream));
  };
  auto router = std::make_unique<router::Router>(std::move(opt), std::move(env));
  if (!router->Start().ok()) return nullptr;
  return router;
}

// Router options whose breakers open after `failures` failures in a row and stay open
// `cooldown_ms` (the rest default).
inline router::RouterOptions BreakerAfter(uint32_t failures, int64_t cooldown_ms) {
  router::RouterOptions opt;
  opt.breaker_failures = failures;
  opt.breaker_cooldown_ms = cooldown_ms;
  return opt;
}

// The record of a mixed worker "<host>:1" at http://<host>:1 serving model "m".
inline discovery::WorkerRecord WorkerRecordOf(const std::string& host) {
  discovery::WorkerRecord r;
  r.worker_id = host + ":1";
  r.url = "http://" + host + ":1";
  r.model_name = "m";
  return r;
}

// The record of a worker "<host>:1" serving model "m" in `mode`, speaking `protocol`;
// a prefill worker gets its bootstrap fields (<host>:8998, engine id "engine-<host>").
inline discovery::WorkerRecord PdWorkerRecord(const std::string& host, discovery::DisaggMode mode,
                                              discovery::PdProtocol protocol) {
  discovery::WorkerRecord r = WorkerRecordOf(host);
  r.disagg_mode = mode;
  r.pd_protocol = protocol;
  r.disagg_protocol = std::string(discovery::PdProtocolName(protocol));
  if (mode == discovery::DisaggMode::kPrefill) {
    r.pd.bootstrap_host = host;
    r.pd.bootstrap_port = 8998;
    r.pd.bootstrap_addr = host + ":8998";
    r.pd.engine_id = "engine-" + host;
  }
  return r;
}

}  // namespace infera::testing

// The names every in-process router test uses, in the namespace the tests are written in.
namespace infera::router {
using testing::Answer;
using testing::TestClient;
using testing::TestClock;
using testing::WaitFor;
}  // namespace infera::router
