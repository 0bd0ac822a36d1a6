// The dashboard (GET /dashboard): one self-contained HTML page (inline CSS, JS and
// SVG charts; no external resource) that polls GET /v1/admin/fleet every second
// (doc/operations.md "Dashboard"). With `#token=T` in the page's URL it sends
// `Authorization: Bearer T` (the admin token).
#pragma once

#include <string_view>

namespace infera::router {

std::string_view DashboardHtml();

// With --admin-token, a browser opening /dashboard (Accept: text/html) without the
// header gets this as the 401's body: no fleet data; with `#token=T` in its URL it
// fetches /dashboard with `Authorization: Bearer T` and shows the answer in place.
std::string_view DashboardTokenPage();

}  // namespace infera::router
