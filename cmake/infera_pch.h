// The precompiled header of the network-facing targets (INFERA_PCH, cmake/infera.cmake,
// doc/build.md): the third-party headers that make up most of their parse time.
// Only third-party and standard headers: each source still includes what it uses.
#pragma once

// clang-format off
#include <utility>  // must precede boost/asio (Boost 1.74's awaitable.hpp, src/http/asio.h)
#include <boost/asio.hpp>
// clang-format on
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>
