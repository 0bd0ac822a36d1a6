// UsageProbe: what a worker's answer says it served from its prefix cache.
//
// vLLM (and the mock engine) report `usage.prompt_tokens_details.cached_tokens`: in a
// whole chat/completions body, and in a streamed answer in the usage chunk (the
// last data event when the request asked for stream_options.include_usage; every
// chunk with continuous usage stats, where the last one wins). The relay feeds the
// worker's bytes here as it forwards them; the dispatcher compares the result with
// the pick's prediction (core::PredictionTracker). Answers without the field (SGLang
// without usage, a stream without include_usage, an error body) give nullopt: no
// sample, never a guess.
//
// Only payloads that contain "cached_tokens" are parsed (simdjson), so an ordinary
// token chunk costs one substring search after the SSE split.
//
// A whole body too large to hold (the relay streams it, doc/router.md "Streaming
// relay") is fed piece by piece to BodyPiece(): only its last kTailBytes are kept,
// and FinishBody() reads the last "usage" object among them (vLLM writes usage after
// the choices, near the end), so memory stays bounded whatever the body's size.
//
// Thread-safety: none (one probe per response).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "router/request/sse_parser.h"

namespace infera::router {

class UsageProbe {
 public:
  // A whole (non-streamed) JSON body.
  void Whole(std::string_view body);
  // Upstream SSE bytes, in arbitrary pieces.
  void Chunk(std::string_view bytes);
  // A whole body in pieces (bounded: its tail is kept), then its end.
  void BodyPiece(std::string_view piece);
  void FinishBody();
  // Bytes of a streamed body's tail searched for the usage object.
  static constexpr size_t kTailBytes = 64u << 10;
  // The reported cached tokens (the last report seen), if any.
  std::optional<uint64_t> cached_tokens() const { return cached_tokens_; }

 private:
  void Parse(std::string_view json);

  SseParser sse_;
  std::string tail_;  // BodyPiece: the body's last bytes (at most 2 * kTailBytes)
  std::optional<uint64_t> cached_tokens_;
};

}  // namespace infera::router
