// SseParser: splits a text/event-stream byte stream into events' data payloads.
//
// Bytes arrive in arbitrary pieces; Feed() returns the `data:` payload of each
// event completed by this piece (multi-line data joined with "\n"). Comments and
// other fields are ignored. CRLF and LF line ends are accepted.
//
// Thread-safety: none (one parser per stream).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace infera::router {

class SseParser {
 public:
  std::vector<std::string> Feed(std::string_view bytes);

 private:
  std::string line_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace infera::router
