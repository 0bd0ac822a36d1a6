// SseFramer: cuts a text/event-stream byte stream into whole events, bounded.
//
// The relay forwards an upstream SSE answer only in whole events: Feed() takes the
// bytes as they arrive, in arbitrary pieces, and appends to `out` the bytes of every
// event the piece completed (each with its terminating empty line); the bytes of an
// event not yet complete are held back. So a client never receives part of an event,
// and an in-band error event written after an upstream failure is always an event of
// its own (doc/router.md "Streaming relay").
//
// An event is every byte up to and including an empty line; lines end in LF or CRLF
// (as SseParser reads them; a lone CR is not a line end). The held, incomplete event
// is bounded by `max_event_bytes`: past it Feed() returns false and accepts nothing
// more (the relay ends the stream with an in-band error). Memory per stream is
// therefore at most max_event_bytes plus one piece.
//
// Thread-safety: none (one framer per stream).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace infera::router {

class SseFramer {
 public:
  explicit SseFramer(size_t max_event_bytes) : max_event_bytes_(max_event_bytes) {}

  // Appends to `out` the events `bytes` completed. False once the incomplete event
  // held exceeds max_event_bytes (then and after: nothing appended).
  bool Feed(std::string_view bytes, std::string& out);

  // Bytes of the event begun but not completed (what a failure discards).
  size_t pending_bytes() const { return pending_.size(); }
  bool overflowed() const { return overflowed_; }
  size_t max_event_bytes() const { return max_event_bytes_; }

 private:
  const size_t max_event_bytes_;
  std::string pending_;    // the incomplete event
  size_t line_bytes_ = 0;  // bytes of the current line so far (its LF not yet seen)
  bool line_cr_ = false;   // ... and its first byte is CR
  bool overflowed_ = false;
};

}  // namespace infera::router
