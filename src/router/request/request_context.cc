#include "router/request/request_context.h"

namespace infera::router {

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSuccess:
      return "success";
    case Outcome::kClientError:
      return "client_error";
    case Outcome::kCancelled:
      return "cancelled";
    case Outcome::kTimeout:
      return "timeout";
    case Outcome::kUpstreamError:
      return "upstream_error";
    case Outcome::kNoWorker:
      return "no_worker";
    case Outcome::kRouterError:
      return "router_error";
  }
  return "success";
}

}  // namespace infera::router
