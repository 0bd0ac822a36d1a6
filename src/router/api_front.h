// ApiFront: the router's route table (doc/router.md "Endpoints").
//
//   POST /v1/chat/completions, /v1/completions, /v1/messages -> RequestPipeline
//   GET|HEAD /health, /ready, /v1/models, /v1/workers, /metrics,
//            /v1/admin/cache-view/{worker_id}?dp_rank=R,
//            /v1/admin/fleet                                  -> AdminViews
//   GET|HEAD /dashboard                                       -> DashboardHtml()
//   a known path with another method -> 405; anything else -> 404
// With an admin token (AdminAuth) a protected path without it -> 401, before routing.
// Every answer carries X-Infera-Request-Id: the client's (at most 128 bytes) or a
// generated one. Errors under /v1/messages are in Anthropic's shape, others OpenAI's.
//
// Thread-safety: Handle runs on the connection's loop; one front serves all loops.
#pragma once

#include <string>

#include "http/server.h"
#include "router/admin/admin_auth.h"
#include "router/admin/admin_views.h"
#include "router/request/request_ids.h"
#include "router/request_pipeline.h"

namespace infera::router {

class ApiFront {
 public:
  // REQUIRES: every reference outlives the front.
  ApiFront(RequestPipeline& pipeline, const AdminViews& views, RequestIds& ids, AdminAuth auth = {})
      : pipeline_(pipeline), views_(views), ids_(ids), auth_(auth) {}

  http::Awaitable<void> Handle(http::Request& req, http::ResponseWriter& w);

  // The body of an error the HTTP server emits itself (limits, malformed HTTP), in the
  // shape of the API `target` belongs to.
  static http::ErrorBody ServerErrorBody(int status, std::string_view message,
                                         std::string_view target);

 private:
  // 401 in OpenAI's shape with a WWW-Authenticate: Bearer challenge.
  http::Awaitable<void> SendUnauthorized(http::ResponseWriter& w, bool presented,
                                         const std::string& request_id, bool browser);
  http::Awaitable<void> CacheView(http::Request& req, http::ResponseWriter& w,
                                  std::string_view worker_id, const std::string& request_id);

  RequestPipeline& pipeline_;
  const AdminViews& views_;
  RequestIds& ids_;
  const AdminAuth auth_;
};

}  // namespace infera::router
