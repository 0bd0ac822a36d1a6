// Test helper shared by the simulator's unit tests.
#pragma once

#include <cstddef>
#include <numeric>
#include <vector>

#include "core/types.h"

namespace infera::sim::test_util {

// n consecutive token ids starting at `first`.
inline std::vector<core::TokenId> Tokens(size_t n, core::TokenId first) {
  std::vector<core::TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

}  // namespace infera::sim::test_util
