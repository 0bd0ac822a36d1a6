#include "router/request/request_ids.h"

namespace infera::router {
namespace {

void AppendHex(std::string& out, uint64_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i) out.push_back(kHex[(v >> (4 * i)) & 0xf]);
}

}  // namespace

std::string RequestIds::Next() {
  const uint64_t n = seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t x = (n * 0x9e3779b97f4a7c15ULL) ^ salt_;
  std::string id;
  id.reserve(24);
  AppendHex(id, x, 16);
  AppendHex(id, n & 0xffffffff, 8);
  return id;
}

}  // namespace infera::router
