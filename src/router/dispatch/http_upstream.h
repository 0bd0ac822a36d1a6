// HttpUpstream: Upstream over src/http's Client, one keep-alive pool per event loop.
//
// Deadlines arrive on the router's clock and are turned into steady_clock time
// points for the client: now + (deadline - clock.NowNs()).
//
// Thread-safety: Send() from any loop of `pool` (it uses that loop's client).
#pragma once

#include <memory>
#include <vector>

#include "core/clock.h"
#include "http/client.h"
#include "http/io_pool.h"
#include "router/dispatch/upstream.h"

namespace infera::router {

class HttpUpstream final : public Upstream {
 public:
  // REQUIRES: pool and clock outlive the upstream.
  HttpUpstream(http::IoPool& pool, const core::Clock& clock);

  http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> Send(
      UpstreamRequest request) override;

 private:
  const core::Clock& clock_;
  std::vector<std::unique_ptr<http::Client>> clients_;  // one per loop
};

}  // namespace infera::router
