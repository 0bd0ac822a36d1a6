// AttemptWatch: ends one upstream attempt that has no answer head yet, so the
// dispatcher fails it over before anything reached the client (doc/router.md
// "First-byte timeout"):
//
//   first-byte timeout: no answer head within `first_byte_timeout_ms` of sending
//     (streaming requests: vLLM and SGLang send an SSE answer's head before the
//     prefill, so only a stuck engine holds it back; 0: off);
//   unhealthy: the worker's active health checks flip it to unhealthy meanwhile (a
//     frozen engine), whatever the request kind.
//
//   AttemptWatch watch(executor, worker, ctx.cancel, timeout_ms);
//   request.cancel = watch.cancel();
//   auto sent = co_await upstream.Send(std::move(request));
//   if (AttemptWatch::Fired f = watch.Disarm(); f != AttemptWatch::Fired::kNone) ...
//
// The attempt gets its own Cancellation, which the watch cancels when it fires and
// which the request's own (`parent`: the client went away) cancels too, for the whole
// life of the watch (keep it alive while the answer is relayed). A watch that fired
// leaves the attempt failed even if the head won the race: the caller cancels the
// response and fails over.
//
// Thread-safety: one loop (the attempt's); the worker's verdict flip posts to it.
#pragma once

#include <cstdint>
#include <memory>

#include "http/asio.h"
#include "http/client.h"
#include "router/plan/fleet.h"

namespace infera::router {

class AttemptWatch {
 public:
  enum class Fired : uint8_t { kNone, kFirstByteTimeout, kUnhealthy };

  // REQUIRES: `worker` outlives the watch; called on the attempt's loop (`executor`).
  AttemptWatch(http::asio::any_io_executor executor, const FleetWorker& worker,
               std::shared_ptr<http::Cancellation> parent, int64_t first_byte_timeout_ms);
  ~AttemptWatch();
  AttemptWatch(const AttemptWatch&) = delete;
  AttemptWatch& operator=(const AttemptWatch&) = delete;

  // The attempt's cancellation (for UpstreamRequest::cancel).
  const std::shared_ptr<http::Cancellation>& cancel() const;
  // The head arrived or the Send failed: stops watching; what fired, if anything.
  Fired Disarm();

  struct State;

 private:
  std::shared_ptr<State> state_;
  const FleetWorker& worker_;
  std::shared_ptr<http::Cancellation> parent_;
  uint64_t waiter_ = 0;
  bool armed_ = true;
};

}  // namespace infera::router
