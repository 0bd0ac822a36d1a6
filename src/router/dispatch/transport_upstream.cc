#include "router/dispatch/transport_upstream.h"

namespace infera::router {

TransportUpstream::TransportUpstream(std::unique_ptr<Upstream> http, std::unique_ptr<Upstream> nats)
    : http_(std::move(http)), nats_(std::move(nats)) {}

http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> TransportUpstream::Send(
    UpstreamRequest request) {
  if (request.transport == RequestTransport::kNats) {
    if (nats_ == nullptr) {
      co_return WithClientMessage(
          absl::UnavailableError("it registered the nats request transport but this router "
                                 "runs without it (--request-transport nats)"),
          "it registered the nats request transport but this router runs without it "
          "(--request-transport nats)");
    }
    co_return co_await nats_->Send(std::move(request));
  }
  co_return co_await http_->Send(std::move(request));
}

}  // namespace infera::router
