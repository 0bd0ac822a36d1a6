#include "router/dispatch/usage_probe.h"

#include <string>

#include "simdjson.h"

namespace infera::router {

void UsageProbe::Whole(std::string_view body) { Parse(body); }

void UsageProbe::Chunk(std::string_view bytes) {
  for (const std::string& data : sse_.Feed(bytes)) Parse(data);
}

void UsageProbe::BodyPiece(std::string_view piece) {
  if (piece.size() >= kTailBytes) {
    tail_.assign(piece.substr(piece.size() - kTailBytes));
    return;
  }
  tail_.append(piece);
  if (tail_.size() > 2 * kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
}

void UsageProbe::FinishBody() {
  // The last `"usage"` key of the tail and the object that follows it, braces
  // balanced outside strings; parsed as {"usage": <object>}.
  const std::string_view tail(tail_);
  for (size_t key = tail.rfind("\"usage\""); key != std::string_view::npos;
       key = key == 0 ? std::string_view::npos : tail.rfind("\"usage\"", key - 1)) {
    size_t i = key + 7;
    while (i < tail.size() && (tail[i] == ' ' || tail[i] == '\n' || tail[i] == '\r' ||
                               tail[i] == '\t' || tail[i] == ':')) {
      ++i;
    }
    if (i >= tail.size() || tail[i] != '{') continue;
    int depth = 0;
    bool in_string = false;
    size_t end = i;
    for (; end < tail.size(); ++end) {
      const char c = tail[end];
      if (in_string) {
        if (c == '\\') {
          ++end;
        } else if (c == '"') {
          in_string = false;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{') {
        ++depth;
      } else if (c == '}' && --depth == 0) {
        break;
      }
    }
    if (end >= tail.size()) continue;
    std::string doc = "{\"usage\":";
    doc.append(tail.substr(i, end + 1 - i)).push_back('}');
    Parse(doc);
    if (cached_tokens_) break;
  }
  tail_.clear();
  tail_.shrink_to_fit();
}

void UsageProbe::Parse(std::string_view json) {
  if (json.find("\"cached_tokens\"") == std::string_view::npos) return;
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS) return;
  uint64_t cached = 0;
  if (doc["usage"]["prompt_tokens_details"]["cached_tokens"].get_uint64().get(cached) ==
      simdjson::SUCCESS) {
    cached_tokens_ = cached;
  }
}

}  // namespace infera::router
