// Flag groups of failover: attempts, breaker, health checks, Infera's aliases.
// Each function is one entry of kFlagGroups (flag_table.cc); README.md says how a flag
// is added.
#include <cmath>

#include "router/config/router_flags.h"

namespace infera::router::config {

// Request deadline, failover attempts and the circuit breaker.
void AddFailoverFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  app.add_option("--request-timeout-ms", o.request_timeout_ms, "Per-request upstream deadline")
      ->capture_default_str();
  app.add_option("--max-attempts", o.max_attempts,
                 "Workers tried per request before the first byte (failover)")
      ->capture_default_str();
  app.add_option("--breaker-failures", o.breaker_failures,
                 "Consecutive failures that open a worker's circuit breaker (0: no breaker)")
      ->capture_default_str();
  app.add_option("--breaker-cooldown-ms", o.breaker_cooldown_ms,
                 "Open-breaker time before a half-open probe")
      ->capture_default_str();
}

// Active health checks, the first-byte timeout and the breaker's backoff
// (doc/router.md "Health and readiness", "Active health checks", "First-byte timeout",
// "Circuit breaker").
void AddHealthFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  app.add_option("--health-check-interval-ms", o.health_check.interval_ms,
                 "Probe every worker's health endpoint this often (0: no health checks)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  app.add_option("--health-check-timeout-ms", o.health_check.timeout_ms,
                 "A probe with no answer this long fails")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}));
  app.add_option("--health-check-failures", o.health_check.thresholds.unhealthy_after,
                 "Failed probes in a row that take a worker out of picks (and fail over the "
                 "requests waiting on it for a first byte)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--health-check-successes", o.health_check.thresholds.healthy_after,
                 "Passed probes in a row that bring it back")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--health-check-path", o.health_check.path,
                 "The workers' health endpoint (an answer below 500 passes)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& path) {
            return path.starts_with("/") ? std::string() : std::string("must start with /");
          },
          "PATH"));
  app.add_option("--first-byte-timeout-ms", o.first_byte_timeout_ms,
                 "A streaming request whose worker sent no answer head this long after the "
                 "request fails over to another worker, counted as a breaker failure (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  app.add_option("--breaker-max-cooldown-ms", o.breaker_max_cooldown_ms,
                 "Each failed half-open probe doubles the breaker's cooldown up to this")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
}

// Infera's names of the breaker and retry flags (doc/router.md "Circuit breaker").
void AddInferaAliasFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  auto seconds_to_ms = [](int64_t& ms) { return [&ms](double s) { ms = std::llround(s * 1000); }; };
  app.add_option("--breaker-failure-threshold", o.breaker_failures,
                 "Infera's name for --breaker-failures (0: no breaker)")
      ->check(CLI::Range(0u, 1'000'000u))
      ->excludes(app.get_option("--breaker-failures"));
  app.add_option_function<double>("--breaker-cooldown-s", seconds_to_ms(o.breaker_cooldown_ms),
                                  "Infera's --breaker-cooldown-ms in seconds")
      ->check(CLI::Range(0.0, 86'400.0))
      ->excludes(app.get_option("--breaker-cooldown-ms"));
  app.add_option_function<double>("--breaker-max-cooldown-s",
                                  seconds_to_ms(o.breaker_max_cooldown_ms),
                                  "Infera's --breaker-max-cooldown-ms in seconds")
      ->check(CLI::Range(0.0, 86'400.0))
      ->excludes(app.get_option("--breaker-max-cooldown-ms"));
  app.add_option_function<int>(
         "--request-max-retries", [&o](int retries) { o.max_attempts = retries + 1; },
         "Infera's retry count: other workers tried after the first before its first byte "
         "(--max-attempts = N + 1; 0: no failover)")
      ->check(CLI::Range(0, 1000))
      ->excludes(app.get_option("--max-attempts"));
}

}  // namespace infera::router::config
