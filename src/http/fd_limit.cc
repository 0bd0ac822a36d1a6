#include "http/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>

namespace infera::http {
namespace {

// RLIM_INFINITY as a number: the kernel's own cap on descriptors (fs.nr_open) is
// 2^20 by default; asking for more fails.
constexpr rlim_t kUnlimitedFds = rlim_t{1} << 20;

}  // namespace

OpenFileLimit RaiseOpenFileLimit() {
  OpenFileLimit out;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return out;
  out.before = static_cast<int64_t>(lim.rlim_cur);
  out.hard = static_cast<int64_t>(std::min(lim.rlim_max, kUnlimitedFds));
  const rlim_t want = std::min(lim.rlim_max, kUnlimitedFds);
  if (lim.rlim_cur < want) {
    rlimit raised = lim;
    raised.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim.rlim_cur = want;
  }
  out.soft = static_cast<int64_t>(std::min(lim.rlim_cur, kUnlimitedFds));
  return out;
}

int64_t DefaultMaxConnections(int64_t soft_limit, int64_t other_fds) {
  return std::max<int64_t>(1, (soft_limit - kReservedFds - std::max<int64_t>(other_fds, 0)) / 2);
}

}  // namespace infera::http
