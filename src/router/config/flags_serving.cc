// Flag groups of the server and its operation: listen, limits, logs, admin.
// Each function is one entry of kFlagGroups (flag_table.cc); README.md says how a flag
// is added.
#include "router/config/router_flags.h"

namespace infera::router::config {

// Where the router listens and how many event loops serve it.
void AddListenFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  app.add_option("--host", f.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", f.port, "Port to listen on (0: any free port)")->capture_default_str();
  app.add_option("--threads", o.threads, "Event-loop threads (0: all cores)")
      ->capture_default_str();
}

// Request, answer and connection limits, and the drain on SIGTERM.
void AddLimitFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  app.add_option("--max-body-bytes", f.max_body_bytes, "Request body limit (413 above)")
      ->capture_default_str();
  app.add_option("--max-header-bytes", f.max_header_bytes, "Request header limit (431 above)")
      ->capture_default_str();
  app.add_option("--max-sse-event-bytes", o.max_sse_event_bytes,
                 "Largest SSE event relayed from a worker; past it the stream ends with an "
                 "in-band error event")
      ->capture_default_str();
  app.add_option("--max-translated-response-bytes", o.max_translated_response_bytes,
                 "Largest non-streamed worker answer translated for /v1/messages (502 above)")
      ->capture_default_str();
  app.add_option("--max-connections", o.server.max_connections,
                 "Open client connections; past it a new one gets 503 (0: (open-file limit "
                 "- 64) / 2, the soft limit raised to the hard one at start)")
      ->capture_default_str();
  app.add_option("--idle-timeout-ms", o.server.idle_timeout_ms,
                 "Close idle keep-alive client connections after this")
      ->capture_default_str();
  app.add_option("--drain-timeout-ms", o.server.drain_timeout_ms,
                 "On SIGTERM, wait this long for in-flight requests")
      ->capture_default_str();
}

// Logging, the data-plane alias and the startup doctor.
void AddOperationFlags(CLI::App& app, RouterFlags& f) {
  f.log_flag = app.add_option("--log-level", f.log_level,
                              "trace | debug | info | warn | error | off, or per target: "
                              "info,decode_demand=debug (also infera_router::decode_demand=debug); "
                              "without it RUST_LOG is read (default info)")
                   ->capture_default_str();
  f.backend_flag = app.add_option(
      "--router-backend", f.router_backend,
      "python | rust (Infera's choice of data plane; env INFERA_ROUTER_BACKEND): both run "
      "this router's one native data plane");
  doctor::AddStartupDoctorFlags(app, f.startup_doctor);
}

// The admin token (doc/router.md "Admin token").
void AddAdminFlags(CLI::App& app, RouterFlags& f) {
  // --admin-token (doc/router.md "Admin token").
  f.token_flag = app.add_option(
      "--admin-token", f.admin_token,
      "Bearer token that /v1/admin/*, /v1/workers and /dashboard require (env "
      "INFERA_ADMIN_TOKEN; default: none, open). A command line is visible to every user "
      "of the machine: prefer --admin-token-file or the environment");
  f.token_file_flag = app.add_option("--admin-token-file", f.admin_token_file,
                                     "File holding the admin token (trailing newline ignored)");
  app.add_flag("--protect-metrics", f.protect_metrics,
               "/metrics requires the admin token too (default: open to scrapers)");
}

}  // namespace infera::router::config
