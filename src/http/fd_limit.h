// Open-file limits of the process, and the connection cap derived from them.
//
// RaiseOpenFileLimit() raises the soft RLIMIT_NOFILE to the hard limit (a server
// that runs out of descriptors refuses clients and fails upstream connects) and
// returns the soft limit in force afterwards. DefaultMaxConnections() is the
// client-connection cap a server uses when none is configured: the limit minus
// kReservedFds (listeners, event sockets, logs, the resolver) and what other parts of
// the process hold for themselves (`other_fds`: KV event subscriptions, which grow with
// the fleet), halved because a proxied request holds an upstream connection as well as
// the client's.
//
// Thread-safety: RaiseOpenFileLimit changes process state; call it at start-up.
#pragma once

#include <cstdint>

namespace infera::http {

inline constexpr int64_t kReservedFds = 64;

struct OpenFileLimit {
  int64_t before = 0;  // soft limit found at start
  int64_t soft = 0;    // soft limit now
  int64_t hard = 0;
};

OpenFileLimit RaiseOpenFileLimit();

// max(1, (soft_limit - kReservedFds - other_fds) / 2).
int64_t DefaultMaxConnections(int64_t soft_limit, int64_t other_fds = 0);

}  // namespace infera::http
