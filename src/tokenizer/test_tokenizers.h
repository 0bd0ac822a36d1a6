// Small synthetic tokenizer.json documents for unit tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace infera::tokenizer::testing {

// GPT-2 byte -> unicode spelling of one byte.
inline std::string ByteSpelling(int b) {
  int n = 0;
  int cp = -1;
  for (int x = 0; x < 256; ++x) {
    bool keep = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    int c = keep ? x : 256 + n++;
    if (x == b) cp = c;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

// A Qwen-like byte-level BPE: ids 0..255 are the bytes, then merges in order.
// Added tokens <|im_start|> (1000), <|im_end|> (1001), special.
inline nlohmann::json ByteLevelTokenizer(bool pair_merges = false, bool ignore_merges = false) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteSpelling(b)] = b;
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"},   {"he", "ll"},   {"hell", "o"}, {"Ġ", "w"},
      {"o", "r"}, {"Ġw", "or"}, {"Ġwor", "ld"}, {"l", "d"},    {"Ġ", "Ġ"},
      {"i", "n"}, {"Ġ", "t"},   {"Ġt", "he"},   {"a", "a"},    {"aa", "aa"}};
  nlohmann::json m = nlohmann::json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
    if (pair_merges) {
      m.push_back({a, b});
    } else {
      m.push_back(a + " " + b);
    }
  }
  // A token reachable only without merges (for ignore_merges).
  vocab["Ġwhole"] = id++;
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = nlohmann::json::array({{{"id", 1000},
                                              {"content", "<|im_start|>"},
                                              {"single_word", false},
                                              {"lstrip", false},
                                              {"rstrip", false},
                                              {"normalized", false},
                                              {"special", true}},
                                             {{"id", 1001},
                                              {"content", "<|im_end|>"},
                                              {"single_word", false},
                                              {"lstrip", false},
                                              {"rstrip", false},
                                              {"normalized", false},
                                              {"special", true}}});
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       nlohmann::json::array(
           {{{"type", "Split"},
             {"pattern",
              {{"Regex",
                R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", false},
             {"use_regex", false}}})}};
  j["post_processor"] = nullptr;
  j["model"] = {{"type", "BPE"},          {"dropout", nullptr},
                {"unk_token", nullptr},   {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", ignore_merges},
                {"vocab", vocab},         {"merges", m}};
  return j;
}

// A Gemma-like SentencePiece BPE: Replace " " -> "▁", byte fallback, <bos> template.
inline nlohmann::json MetaspaceTokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  vocab["<pad>"] = 0;
  vocab["<eos>"] = 1;
  vocab["<bos>"] = 2;
  vocab["<unk>"] = 3;
  int id = 4;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = id++;
  }
  for (const char* t : {"▁", "a", "b", "c", "h", "e", "l", "o", "w", "r", "d", "é"})
    vocab[t] = id++;
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"},   {"he", "ll"}, {"hell", "o"},  {"▁", "w"},
      {"o", "r"}, {"▁w", "or"}, {"l", "d"},   {"▁wor", "ld"}, {"▁", "▁"}};
  nlohmann::json m = nlohmann::json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
    m.push_back({a, b});
  }
  nlohmann::json j;
  j["added_tokens"] = nlohmann::json::array(
      {{{"id", 2}, {"content", "<bos>"}, {"special", true}, {"normalized", false}},
       {{"id", 1}, {"content", "<eos>"}, {"special", true}, {"normalized", false}}});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}};
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"String", " "}}},
                        {"behavior", "MergedWithPrevious"},
                        {"invert", false}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", nlohmann::json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}};
  j["model"] = {{"type", "BPE"},         {"unk_token", "<unk>"}, {"fuse_unk", true},
                {"byte_fallback", true}, {"vocab", vocab},       {"merges", m}};
  return j;
}

}  // namespace infera::tokenizer::testing
