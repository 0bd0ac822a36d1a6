// NatsUpstream: the NATS request transport (--request-transport nats;
// doc/nats-request-transport.md), Infera's wire format (src/transport/nats_request_wire.h).
//
// Send() publishes the request to the worker's subject `infera.req.<token(worker_id)>`
// with a reply inbox `_INBOX.<nuid>.<n>` (one wildcard subscription per router routes
// every reply to its request), then waits for the answer's head:
//   * no responders (the server's Status 503: nobody serves the subject) ->
//     Unavailable, the worker is unreachable (failover, as a refused connection);
//   * an error frame first -> Unavailable with the worker's text (failover);
//   * a done frame first -> its rs-status, an empty body;
//   * a data frame with rs-status (our workers) -> that status and rs-content-type;
//   * a data frame without (Infera's workers): a streaming request answers 200
//     text/event-stream (as Infera's routers assume); otherwise the frames are held
//     until done brings the status (at most max_buffered_bytes: ResourceExhausted).
// Then Read() hands out the body as it arrives. An SSE answer is handed out in whole
// events (a piece ending mid-event is held until the event's blank line, up to
// max_buffered_bytes), so a failure mid-stream never cuts an event in two.
//
// Timeouts (DeadlineExceeded): the idle timeout bounds each wait for the next frame
// ("nats request stalled: no reply within N s (idle timeout)"), the max duration the
// whole exchange from the publish ("nats request exceeded total timeout N s"), the
// request's own deadline both. A request abandoned before its done or error frame
// (client gone: Cancel(), a timeout, destruction) publishes its inbox to
// `infera.cancel.<token(worker_id)>`, cancel_sends times cancel_gap_ms apart (a worker
// reconnecting meanwhile still hears it). Memory: a request holds at most
// max_buffered_bytes of reply frames its reader has not taken; past it the request
// fails (ResourceExhausted) and the worker is told to cancel. The NATS connection is
// down -> Unavailable at once (never a wait).
//
// Thread-safety: Send() from any loop; a response is used on the loop that sent it.
// Responses may outlive the upstream (they share its connection).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/clock.h"
#include "router/dispatch/nats_upstream_options.h"
#include "router/dispatch/upstream.h"

namespace infera::router {

struct NatsInbox;

class NatsUpstream final : public Upstream {
 public:
  // REQUIRES: ValidateNatsUpstreamOptions(options).ok(); clock outlives the upstream.
  NatsUpstream(NatsUpstreamOptions options, const core::Clock& clock);
  ~NatsUpstream() override;
  NatsUpstream(const NatsUpstream&) = delete;
  NatsUpstream& operator=(const NatsUpstream&) = delete;

  // Connects (in the background while no server answers; every request fails over
  // meanwhile) and subscribes the reply inboxes. An error only for a bad URL.
  absl::Status Start();
  // Unsubscribes and stops the cancel resends. Idempotent; the destructor calls it.
  void Stop();

  http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> Send(
      UpstreamRequest request) override;

  // infera_router_nats_* families (doc/nats-request-transport.md "Metrics").
  void RenderMetrics(std::string& out) const;

 private:
  const core::Clock& clock_;
  std::shared_ptr<NatsInbox> inbox_;  // the connection, the inbox routing and the counters
};

}  // namespace infera::router
