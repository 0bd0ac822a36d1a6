#include "router/usage_probe.h"

#include <string>

#include "simdjson.h"

namespace infera::router {

void UsageProbe::Whole(std::string_view body) { Parse(body); }

void UsageProbe::Chunk(std::string_view bytes) {
  for (const std::string& data : sse_.Feed(bytes)) Parse(data);
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
