#include "router/api_front.h"

#include <algorithm>
#include <cstdlib>

#include "router/request/anthropic.h"
#include "router/request/api_errors.h"
#include "router/admin/dashboard_page.h"

namespace infera::router {
namespace {

constexpr std::string_view kCacheViewPrefix = "/v1/admin/cache-view/";

bool KnownPath(std::string_view path) {
  return path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/messages" ||
         path == "/health" || path == "/ready" || path == "/v1/models" || path == "/v1/workers" ||
         path == "/metrics" || path == "/v1/admin/fleet" || path == "/dashboard";
}

}  // namespace

http::ErrorBody ApiFront::ServerErrorBody(int status, std::string_view message,
                                          std::string_view target) {
  if (target.substr(0, 12) == "/v1/messages") {
    return http::ErrorBody{"application/json", AnthropicErrorBody(status, message)};
  }
  return http::ErrorBody{"application/json", OpenAiErrorBody(status, message, nullptr)};
}

http::Awaitable<void> ApiFront::Handle(http::Request& req, http::ResponseWriter& w) {
  std::string_view path = req.path();
  std::string request_id(req.headers.Get("X-Infera-Request-Id"));
  // A client id is echoed in headers and bodies: 1-128 visible ASCII characters.
  const bool id_ok =
      request_id.size() <= 128 && std::all_of(request_id.begin(), request_id.end(),
                                              [](char c) { return c > 0x20 && c < 0x7f; });
  if (request_id.empty() || !id_ok) {
    const bool given = !request_id.empty();
    request_id = ids_.Next();
    if (given) {
      co_await SendError(w, path == "/v1/messages" ? ApiKind::kMessages : ApiKind::kChat, 400,
                         "X-Infera-Request-Id must be 1 to 128 visible ASCII characters",
                         request_id);
      co_return;
    }
  }
  if (auth_.Protects(path) && !auth_.Allows(req.headers.Get("Authorization"))) {
    // A browser opening the dashboard cannot send the header itself: it gets the 401
    // as a page that fetches /dashboard with the token from its #token= fragment.
    const bool browser = path == "/dashboard" &&
                         req.headers.Get("Accept").find("text/html") != std::string_view::npos;
    co_await SendUnauthorized(w, !req.headers.Get("Authorization").empty(), request_id, browser);
    co_return;
  }
  const bool post = req.method == "POST";
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (post && path == "/v1/chat/completions") {
    co_await pipeline_.Serve(ApiKind::kChat, req, w, std::move(request_id));
  } else if (post && path == "/v1/completions") {
    co_await pipeline_.Serve(ApiKind::kCompletions, req, w, std::move(request_id));
  } else if (post && path == "/v1/messages") {
    co_await pipeline_.Serve(ApiKind::kMessages, req, w, std::move(request_id));
  } else if (get && path == "/health") {
    co_await SendJson(w, views_.HealthStatus(), views_.HealthJson(), request_id);
  } else if (get && path == "/ready") {
    auto [status, body] = views_.Ready();
    co_await SendJson(w, status, body, request_id);
  } else if (get && path == "/v1/models") {
    co_await SendJson(w, 200, views_.ModelsJson(), request_id);
  } else if (get && path == "/v1/workers") {
    co_await SendJson(w, 200, views_.WorkersJson(), request_id);
  } else if (get && path == "/metrics") {
    http::Headers h;
    h.Add("Content-Type", "text/plain; version=0.0.4");
    co_await w.Send(200, std::move(h), views_.MetricsText());
  } else if (get && path == "/v1/admin/fleet") {
    co_await SendJson(w, 200, views_.FleetJson(), request_id);
  } else if (get && path == "/dashboard") {
    http::Headers h;
    h.Add("Content-Type", "text/html; charset=utf-8");
    h.Add("Cache-Control", "no-cache");
    h.Add("X-Infera-Request-Id", request_id);
    co_await w.Send(200, std::move(h), std::string(DashboardHtml()));
  } else if (get && path.starts_with(kCacheViewPrefix)) {
    co_await CacheView(req, w, path.substr(kCacheViewPrefix.size()), request_id);
  } else {
    const ApiKind kind = path == "/v1/messages" ? ApiKind::kMessages : ApiKind::kChat;
    if (KnownPath(path)) {
      co_await SendError(w, kind, 405,
                         "method " + req.method + " not allowed on " + std::string(path),
                         request_id);
    } else {
      co_await SendError(w, kind, 404, "no route for " + req.method + " " + std::string(path),
                         request_id);
    }
  }
}

http::Awaitable<void> ApiFront::SendUnauthorized(http::ResponseWriter& w, bool presented,
                                                 const std::string& request_id, bool browser) {
  // RFC 6750 §3: a request without credentials gets the bare challenge; one with wrong
  // credentials gets error="invalid_token". The protected paths are none of Anthropic's.
  http::Headers h;
  h.Add("WWW-Authenticate", presented ? "Bearer realm=\"infera-router\", error=\"invalid_token\""
                                      : "Bearer realm=\"infera-router\"");
  h.Add("X-Infera-Request-Id", request_id);
  if (browser) {
    h.Add("Content-Type", "text/html; charset=utf-8");
    h.Add("Cache-Control", "no-store");
    co_await w.Send(401, std::move(h), std::string(DashboardTokenPage()));
    co_return;
  }
  h.Add("Content-Type", "application/json");
  co_await w.Send(401, std::move(h),
                  OpenAiErrorBody(401,
                                  presented ? "invalid admin token: this path needs "
                                              "Authorization: Bearer <the router's --admin-token>"
                                            : "this path needs Authorization: Bearer <the "
                                              "router's --admin-token>",
                                  "invalid_api_key"));
}

http::Awaitable<void> ApiFront::CacheView(http::Request& req, http::ResponseWriter& w,
                                          std::string_view worker_id_view,
                                          const std::string& request_id) {
  std::string worker_id(worker_id_view);
  std::string rank_text = req.QueryParam("dp_rank");
  std::optional<uint32_t> rank;
  bool rank_ok = true;
  if (!rank_text.empty()) {
    char* end = nullptr;
    unsigned long v = std::strtoul(rank_text.c_str(), &end, 10);
    rank_ok = rank_text[0] >= '0' && rank_text[0] <= '9' && end != nullptr && *end == '\0' &&
              v <= 0xffffffffUL;
    rank = static_cast<uint32_t>(v);
  }
  if (!rank_ok) {
    co_await SendError(w, ApiKind::kChat, 400, "dp_rank must be a non-negative integer",
                       request_id);
  } else if (auto view = views_.CacheViewJson(worker_id, rank)) {
    co_await SendJson(w, 200, *view, request_id);
  } else {
    // Built before the co_await: GCC 12 destroys a ?: temporary in a co_await
    // expression twice.
    std::string message = "unknown worker '" + worker_id + "'";
    if (rank) message += " rank " + std::to_string(*rank);
    co_await SendError(w, ApiKind::kChat, 404, message, request_id);
  }
}

}  // namespace infera::router
