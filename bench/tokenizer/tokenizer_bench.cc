// tokenizer_bench: single-threaded tokens/s of infera's tokenizer on corpus pieces,
// and encode time of a long multi-turn chat cold and with its prefix seen before.
//
//   tokenizer_bench TOKENIZER_PATH PIECES_FILE [PASSES] [CHAT_FILE PREFIX_FILE]
// PIECES_FILE: records of (u32 LE class length, class name, u32 LE text length, text).
// Prints one JSON object per line (bench.js compares them with the reference).
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/prefix_caching_encoder.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

uint32_t ReadU32(const std::string& d, size_t* pos) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(d[*pos + i])} << (8 * i);
  *pos += 4;
  return v;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: tokenizer_bench TOKENIZER_PATH PIECES_FILE [PASSES] [CHAT PREFIX]\n";
    return 2;
  }
  auto load_start = Clock::now();
  auto tok = infera::tokenizer::Tokenizer::Load(argv[1]);
  if (!tok.ok()) {
    std::cerr << tok.status() << "\n";
    return 1;
  }
  double load_s = Seconds(load_start, Clock::now());
  int passes = argc > 3 ? std::stoi(argv[3]) : 5;
  std::string data = ReadFile(argv[2]);
  std::map<std::string, std::vector<std::string>> classes;
  size_t pos = 0;
  while (pos + 4 <= data.size()) {
    uint32_t n = ReadU32(data, &pos);
    std::string name = data.substr(pos, n);
    pos += n;
    uint32_t m = ReadU32(data, &pos);
    classes[name].push_back(data.substr(pos, m));
    pos += m;
  }
  std::cout << "{\"what\":\"load\",\"seconds\":" << load_s << "}\n";
  for (const auto& [name, pieces] : classes) {
    size_t bytes = 0;
    for (const auto& p : pieces) bytes += p.size();
    // Pass 0 runs on a cold word cache; the best of the later passes is steady state.
    double first_s = 0, best_s = 1e30;
    size_t tokens = 0;
    for (int pass = 0; pass < passes; ++pass) {
      size_t count = 0;
      auto t0 = Clock::now();
      for (const auto& p : pieces) count += (*tok)->Encode(p, false).size();
      double s = Seconds(t0, Clock::now());
      if (pass == 0)
        first_s = s;
      else if (s < best_s)
        best_s = s;
      tokens = count;
    }
    if (passes == 1) best_s = first_s;
    std::cout << "{\"what\":\"class\",\"class\":\"" << name << "\",\"pieces\":" << pieces.size()
              << ",\"bytes\":" << bytes << ",\"tokens\":" << tokens
              << ",\"cold_seconds\":" << first_s << ",\"seconds\":" << best_s << "}\n";
  }
  if (argc > 5) {
    std::string chat = ReadFile(argv[4]);
    std::string prefix = ReadFile(argv[5]);
    // Cold: a fresh tokenizer (empty word cache), nothing seen before.
    auto fresh = infera::tokenizer::Tokenizer::Load(argv[1]);
    auto t0 = Clock::now();
    size_t n_cold = (*fresh)->Encode(chat, false).size();
    double cold_fresh_s = Seconds(t0, Clock::now());
    // Cold prompt, warm word cache (a server that has tokenized other traffic).
    infera::tokenizer::PrefixCachingEncoder enc(**tok, 64);
    (*tok)->Encode(chat, false);
    double cold_s = 1e30, warm_s = 1e30;
    bool same = true;
    std::vector<uint32_t> full = (*tok)->Encode(chat, false);
    for (int r = 0; r < 5; ++r) {
      infera::tokenizer::PrefixCachingEncoder fresh_enc(**tok, 64);
      t0 = Clock::now();
      auto ids = fresh_enc.Encode(chat);
      cold_s = std::min(cold_s, Seconds(t0, Clock::now()));
      same &= ids == full;
      fresh_enc.Encode(prefix);  // the conversation so far, seen before
      fresh_enc.Encode(prefix);
      t0 = Clock::now();
      auto warm = fresh_enc.Encode(chat);
      warm_s = std::min(warm_s, Seconds(t0, Clock::now()));
      same &= warm == full;
    }
    std::cout << "{\"what\":\"chat\",\"bytes\":" << chat.size() << ",\"tokens\":" << n_cold
              << ",\"cold_fresh_tokenizer_seconds\":" << cold_fresh_s
              << ",\"cold_seconds\":" << cold_s << ",\"prefix_seen_seconds\":" << warm_s
              << ",\"ids_identical\":" << (same ? "true" : "false") << "}\n";
  }
  return 0;
}
