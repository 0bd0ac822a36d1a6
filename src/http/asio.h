// The one place that includes Boost.Asio for src/http users.
//
// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>;
// including it first keeps every translation unit compiling under g++ 12.
#pragma once

// g++ 12 reports a false -Wmismatched-new-delete on Asio's coroutine frame
// allocator (awaitable_frame_base::operator new/delete are a matching pair); the
// warning fires at the end of whichever coroutine the optimiser inlines it into.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
// clang-format off
#include <utility>  // must precede boost/asio (see above)
#include <boost/asio.hpp>
// clang-format on

namespace infera::http {

namespace asio = boost::asio;

template <typename T>
using Awaitable = asio::awaitable<T>;

// A completion token for `co_await op(..., NoThrow(ec))`: the error lands in `ec`
// instead of being thrown (shared by the server and the client).
inline auto NoThrow(boost::system::error_code& ec) {
  return asio::redirect_error(asio::use_awaitable, ec);
}

}  // namespace infera::http
