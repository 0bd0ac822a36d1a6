#include "router/dispatch/sse_framer.h"

#include <cstring>

namespace infera::router {

bool SseFramer::Feed(std::string_view bytes, std::string& out) {
  if (overflowed_) return false;
  // The end of the last event completed inside `bytes` (0: none).
  size_t complete = 0;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const void* nl = std::memchr(bytes.data() + pos, '\n', bytes.size() - pos);
    if (nl == nullptr) {
      if (line_bytes_ == 0) line_cr_ = bytes[pos] == '\r';
      line_bytes_ += bytes.size() - pos;
      break;
    }
    const size_t at = static_cast<size_t>(static_cast<const char*>(nl) - bytes.data());
    if (at > pos && line_bytes_ == 0) line_cr_ = bytes[pos] == '\r';
    line_bytes_ += at - pos;
    // An empty line ("" or "\r" before the LF) ends the event.
    if (line_bytes_ == 0 || (line_bytes_ == 1 && line_cr_)) complete = at + 1;
    line_bytes_ = 0;
    line_cr_ = false;
    pos = at + 1;
  }
  if (complete > 0) {
    out.append(pending_);
    out.append(bytes.data(), complete);
    pending_.clear();
  }
  pending_.append(bytes.data() + complete, bytes.size() - complete);
  if (pending_.size() > max_event_bytes_) {
    overflowed_ = true;
    pending_.clear();
    pending_.shrink_to_fit();
    return false;
  }
  return true;
}

}  // namespace infera::router
