// TransportUpstream: the router's Upstream, one request transport per worker as Infera
// decides it (rust/router/src/proxy.rs `attempt`): a worker whose record says
// request_transport "nats" is reached over NATS (NatsUpstream), every other over HTTP.
// Without --request-transport nats the router has no NATS transport, and a request to a
// NATS worker fails at once as unreachable (failover; Infera answers 502 "worker W
// registered the nats transport but this router has none").
//
// Thread-safety: as the upstreams it holds (Send() from any loop).
#pragma once

#include <memory>

#include "router/dispatch/upstream.h"

namespace infera::router {

class TransportUpstream final : public Upstream {
 public:
  // `http` is required; `nats` may be null (--request-transport http).
  TransportUpstream(std::unique_ptr<Upstream> http, std::unique_ptr<Upstream> nats);

  http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> Send(
      UpstreamRequest request) override;

 private:
  std::unique_ptr<Upstream> http_;
  std::unique_ptr<Upstream> nats_;
};

}  // namespace infera::router
