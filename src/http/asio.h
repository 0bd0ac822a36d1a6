// The one place that includes Boost.Asio for src/http users.
//
// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>;
// including it first keeps every translation unit compiling under g++ 12.
#pragma once

// clang-format off
#include <utility>  // must precede boost/asio (see above)
#include <boost/asio.hpp>
// clang-format on

namespace infera::http {

namespace asio = boost::asio;

template <typename T>
using Awaitable = asio::awaitable<T>;

}  // namespace infera::http
