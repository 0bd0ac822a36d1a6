// Upstream SSE: the bytes arrive cut at positions taken from the first byte (a
// worker's stream comes in arbitrary pieces); SseParser and the Anthropic stream
// translator must handle any of it, and Finish() must close the stream.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "router/anthropic.h"
#include "router/sse_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = 1 + data[0] % 64;
  std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  infera::router::SseParser parser;
  infera::router::AnthropicStreamTranslator translator("m", "r");
  for (size_t pos = 0; pos < bytes.size(); pos += step) {
    std::string_view piece = bytes.substr(pos, step);
    (void)parser.Feed(piece);
    (void)translator.Feed(piece);
  }
  (void)translator.Finish();
  return 0;
}
