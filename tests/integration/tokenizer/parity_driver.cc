// parity_driver: encodes a corpus with infera's tokenizer for the parity test.
//
//   parity_driver TOKENIZER_PATH CORPUS_FILE
// CORPUS_FILE holds records of (u32 little-endian byte length, UTF-8 bytes). For each
// record, prints two lines: the ids without and with special tokens, space-separated.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: parity_driver TOKENIZER_PATH CORPUS_FILE\n";
    return 2;
  }
  auto tok = infera::tokenizer::Tokenizer::Load(argv[1]);
  if (!tok.ok()) {
    std::cerr << tok.status() << "\n";
    return 1;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  std::string data = buf.str();
  std::string out;
  size_t pos = 0;
  while (pos + 4 <= data.size()) {
    uint32_t len = static_cast<uint8_t>(data[pos]) | (static_cast<uint8_t>(data[pos + 1]) << 8) |
                   (static_cast<uint8_t>(data[pos + 2]) << 16) |
                   (static_cast<uint32_t>(static_cast<uint8_t>(data[pos + 3])) << 24);
    pos += 4;
    if (pos + len > data.size()) {
      std::cerr << "truncated corpus\n";
      return 1;
    }
    std::string_view text(data.data() + pos, len);
    pos += len;
    for (bool special : {false, true}) {
      auto ids = (*tok)->Encode(text, special);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out.push_back(' ');
        out.append(std::to_string(ids[i]));
      }
      out.push_back('\n');
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
