#include "transport/nats_request_flags.h"

#include <cstdlib>
#include <optional>

#include "transport/nats_request_wire.h"

namespace infera::transport {

void NatsRequestFlags::Add(CLI::App& app, Side side) {
  const bool router = side == Side::kRouter;
  idle_flag_ = app.add_option("--nats-req-idle-timeout,--nats-req-idle-timeout-s", idle_s_,
                              router ? "--request-transport nats: seconds to wait for a worker's "
                                       "next reply frame (reset per frame; expiry: 504 or an "
                                       "in-band error, and the worker is told to cancel; 0: off; "
                                       "env INFERA_NATS_REQ_IDLE_TIMEOUT)"
                                     : "--request-transport nats: abandon an engine silent this "
                                       "many seconds (an error frame; 0: off; env "
                                       "INFERA_NATS_REQ_IDLE_TIMEOUT)")
                   ->capture_default_str();
  max_flag_ = app.add_option("--nats-req-max-duration,--nats-req-max-duration-s", max_s_,
                             router ? "--request-transport nats: hard cap in seconds on a whole "
                                      "request over NATS (504 and cancel; 0: off; env "
                                      "INFERA_NATS_REQ_MAX_DURATION)"
                                    : "--request-transport nats: hard cap in seconds on each "
                                      "proxied request (0: off; env INFERA_NATS_REQ_MAX_DURATION)")
                  ->capture_default_str();
}

absl::StatusOr<NatsTimeouts> NatsRequestFlags::Resolve() const {
  return Resolve([](const char* name) -> const char* { return std::getenv(name); });
}

absl::StatusOr<NatsTimeouts> NatsRequestFlags::Resolve(
    const std::function<const char*(const char*)>& getenv) const {
  auto given = [](const CLI::Option* flag, double value) {
    return flag != nullptr && flag->count() > 0 ? std::optional<double>(value) : std::nullopt;
  };
  auto idle = TimeoutMs(given(idle_flag_, idle_s_), getenv("INFERA_NATS_REQ_IDLE_TIMEOUT"), 900,
                        "--nats-req-idle-timeout", "INFERA_NATS_REQ_IDLE_TIMEOUT");
  if (!idle.ok()) return idle.status();
  auto max = TimeoutMs(given(max_flag_, max_s_), getenv("INFERA_NATS_REQ_MAX_DURATION"), 0,
                       "--nats-req-max-duration", "INFERA_NATS_REQ_MAX_DURATION");
  if (!max.ok()) return max.status();
  return NatsTimeouts{.idle_timeout_ms = *idle, .max_duration_ms = *max};
}

}  // namespace infera::transport
