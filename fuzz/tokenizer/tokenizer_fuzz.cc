// libFuzzer target: encodes arbitrary bytes with a real tokenizer.json and checks the
// invariants that must hold for any input: no crash, the prefix-caching encoder gives
// the full encode's ids, and every safe boundary splits the encoding exactly.
//
// Tokenizer: $INFERA_TOKENIZER_FUZZ_PATH, else the Qwen 3 tokenizer fetched by
// scripts/fetch-fixtures (INFERA_TOKENIZER_FUZZ_REAL), else the small synthetic one
// committed beside this file (INFERA_TOKENIZER_FUZZ_SYNTHETIC).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/prefix_caching_encoder.h"
#include "tokenizer/tokenizer.h"

namespace {

using infera::tokenizer::PrefixCachingEncoder;
using infera::tokenizer::Tokenizer;

Tokenizer* g_tokenizer = nullptr;
PrefixCachingEncoder* g_encoder = nullptr;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string path;
  if (const char* env = std::getenv("INFERA_TOKENIZER_FUZZ_PATH")) {
    path = env;
  } else if (std::filesystem::exists(INFERA_TOKENIZER_FUZZ_REAL)) {
    path = INFERA_TOKENIZER_FUZZ_REAL;
  } else {
    path = INFERA_TOKENIZER_FUZZ_SYNTHETIC;
  }
  auto t = Tokenizer::Load(path);
  if (!t.ok()) {
    std::fprintf(stderr, "cannot load %s: %s\n", path.c_str(), t.status().ToString().c_str());
    std::abort();
  }
  std::fprintf(stderr, "tokenizer_fuzz: using %s\n", path.c_str());
  g_tokenizer = t->release();
  g_encoder = new PrefixCachingEncoder(*g_tokenizer, 8);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<uint32_t> ids = g_tokenizer->Encode(text, false);
  std::vector<uint32_t> with_special = g_tokenizer->Encode(text, true);
  Check(with_special.size() >= ids.size(), "special tokens only add ids");
  Check(g_encoder->Encode(text) == ids, "prefix-caching encoder equals full encode");
  std::vector<size_t> cuts = g_tokenizer->SafeBoundaries(text);
  for (size_t i = 0; i < cuts.size() && i < 4; ++i) {
    std::vector<uint32_t> joined = g_tokenizer->Encode(text.substr(0, cuts[i]), false);
    std::vector<uint32_t> tail = g_tokenizer->Encode(text.substr(cuts[i]), false);
    joined.insert(joined.end(), tail.begin(), tail.end());
    Check(joined == ids, "safe boundary splits the encoding exactly");
  }
  return 0;
}
