// SteadyClock: the real monotonic clock behind core::Clock, for the online router
// (log/steady_clock.h: the same clock the ingestor and the log limiter default to).
//
// Thread-safety: stateless.
#pragma once

#include "log/steady_clock.h"

namespace infera::router {

using log::SteadyClock;

}  // namespace infera::router
