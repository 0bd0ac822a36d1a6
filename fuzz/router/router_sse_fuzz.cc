// Upstream SSE: the bytes arrive cut at positions taken from the first byte (a
// worker's stream comes in arbitrary pieces); SseParser and the Anthropic stream
// translator must handle any of it, and Finish() must close the stream. The relay's
// SseFramer must let out exactly the stream's bytes up to its last event end, each
// output ending an event, whatever the cuts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "router/request/anthropic_stream.h"
#include "router/dispatch/sse_framer.h"
#include "router/request/sse_parser.h"

namespace {

// True when `out` ends with an empty line (LF or CRLF), at its start or after a LF.
bool EndsAnEvent(std::string_view out) {
  if (!out.ends_with('\n')) return false;
  out.remove_suffix(1);
  if (out.ends_with('\r')) out.remove_suffix(1);
  return out.empty() || out.ends_with('\n');
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = 1 + data[0] % 64;
  std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  infera::router::SseParser parser;
  infera::router::AnthropicStreamTranslator translator("m", "r");
  infera::router::SseFramer framer(1 << 20);
  std::string framed;
  for (size_t pos = 0; pos < bytes.size(); pos += step) {
    std::string_view piece = bytes.substr(pos, step);
    (void)parser.Feed(piece);
    (void)translator.Feed(piece);
    std::string out;
    if (!framer.Feed(piece, out)) std::abort();  // inputs are far below the bound
    if (!out.empty() && !EndsAnEvent(out)) std::abort();
    framed += out;
  }
  (void)translator.Finish();
  // Everything up to the stream's last event end went out, nothing after it.
  if (framed.size() + framer.pending_bytes() != bytes.size() ||
      bytes.substr(0, framed.size()) != framed) {
    std::abort();
  }
  return 0;
}
