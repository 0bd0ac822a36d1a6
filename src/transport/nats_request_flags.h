// The NATS request transport's timeout flags, the same on the router and on the
// workers (infera-register, infera-mock-engine), with Infera's names and precedence
// (flag > environment variable > default; infera/server/args.py,
// rust/router/src/config.rs):
//
//   --nats-req-idle-timeout (--nats-req-idle-timeout-s)  INFERA_NATS_REQ_IDLE_TIMEOUT  900 s
//   --nats-req-max-duration (--nats-req-max-duration-s)  INFERA_NATS_REQ_MAX_DURATION  0 (off)
//
// Usage: `NatsRequestFlags f; f.Add(app, NatsRequestFlags::Side::kRouter);`, parse, then
// `auto t = f.Resolve();` (exit 2 with its message when not OK).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"

namespace infera::transport {

struct NatsTimeouts {
  int64_t idle_timeout_ms = 900'000;
  int64_t max_duration_ms = 0;
};

class NatsRequestFlags {
 public:
  enum class Side : uint8_t { kRouter, kWorker };  // only the help text differs
  void Add(CLI::App& app, Side side);
  // After parsing: InvalidArgument naming the flag or variable (TimeoutMs). The
  // variables are read with `getenv` (a value, or nullptr when unset; the process's
  // environment by default).
  absl::StatusOr<NatsTimeouts> Resolve() const;
  absl::StatusOr<NatsTimeouts> Resolve(const std::function<const char*(const char*)>& getenv) const;

 private:
  double idle_s_ = 900;
  double max_s_ = 0;
  CLI::Option* idle_flag_ = nullptr;
  CLI::Option* max_flag_ = nullptr;
};

}  // namespace infera::transport
