// libFuzzer target: parses arbitrary bytes as tokenizer.json. Malformed files must
// give an error status (never a crash or an exception); files that load must encode.
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  auto t = infera::tokenizer::Tokenizer::FromJson(json);
  if (t.ok()) {
    (*t)->Encode("Hello world <|im_start|> caf\xC3\xA9 \xFF 123", true);
    (*t)->SafeBoundaries("a<|im_start|>b");
  }
  return 0;
}
