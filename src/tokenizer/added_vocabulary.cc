#include "tokenizer/added_vocabulary.h"

#include "tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

bool EndsWithWord(std::string_view s) {
  if (s.empty()) return false;
  size_t k = unicode::LastCharStart(s);
  return unicode::IsAlphanumeric(unicode::DecodeAt(s, &k));
}

bool StartsWithWord(std::string_view s) {
  if (s.empty()) return false;
  size_t k = 0;
  return unicode::IsAlphanumeric(unicode::DecodeAt(s, &k));
}

}  // namespace

void AddedVocabulary::Trie::Add(std::string_view key, int32_t token_index) {
  if (key.empty()) return;
  root_used = true;
  first[static_cast<uint8_t>(key[0])] = true;
  max_len = std::max(max_len, key.size());
  uint32_t node = 0;
  for (char c : key) {
    uint64_t edge = (uint64_t{node} << 8) | static_cast<uint8_t>(c);
    auto it = edges.find(edge);
    if (it == edges.end()) {
      uint32_t child = static_cast<uint32_t>(terminal.size());
      terminal.push_back(-1);
      edges.emplace(edge, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  // The first token with a given content wins, as in Hugging Face's id lookup.
  if (terminal[node] < 0) terminal[node] = token_index;
}

std::optional<std::pair<size_t, int32_t>> AddedVocabulary::Trie::LongestAt(std::string_view text,
                                                                           size_t pos) const {
  std::optional<std::pair<size_t, int32_t>> best;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges.find((uint64_t{node} << 8) | static_cast<uint8_t>(text[i]));
    if (it == edges.end()) break;
    node = it->second;
    if (terminal[node] >= 0) best = std::make_pair(i + 1 - pos, terminal[node]);
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<Token> tokens,
                                 const std::function<std::string(std::string_view)>& normalize)
    : tokens_(std::move(tokens)) {
  normalized_contents_.resize(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const Token& t = tokens_[i];
    by_content_.emplace(t.content, t.id);
    by_id_.emplace(t.id, i);
    if (t.normalized) {
      normalized_contents_[i] = normalize(t.content);
      normalized_.Add(normalized_contents_[i], static_cast<int32_t>(i));
    } else {
      raw_.Add(t.content, static_cast<int32_t>(i));
    }
  }
}

std::optional<uint32_t> AddedVocabulary::TokenToId(std::string_view content) const {
  auto it = by_content_.find(absl::string_view(content.data(), content.size()));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> AddedVocabulary::IdToToken(uint32_t id) const {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return tokens_[it->second].content;
}

void AddedVocabulary::RawMatches(const Trie& trie, std::string_view text,
                                 std::vector<std::pair<size_t, int32_t>>* out) const {
  if (!trie.root_used) return;
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    if (!trie.first[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    auto m = trie.LongestAt(text, pos);
    if (!m) {
      ++pos;
      continue;
    }
    out->emplace_back(pos, m->second);
    pos += m->first;
  }
}

void AddedVocabulary::SplitText(std::string_view text, bool normalized_pass,
                                std::vector<Split>* out) const {
  const Trie& trie = normalized_pass ? normalized_ : raw_;
  if (text.empty()) {
    out->push_back({0, 0, -1});
    return;
  }
  std::vector<std::pair<size_t, int32_t>> matches;
  RawMatches(trie, text, &matches);
  size_t start_offset = 0;
  for (auto [match_start, index] : matches) {
    const Token& t = tokens_[static_cast<size_t>(index)];
    size_t len = normalized_pass ? normalized_contents_[static_cast<size_t>(index)].size()
                                 : t.content.size();
    size_t start = match_start;
    size_t stop = match_start + len;
    if (t.single_word) {
      bool start_space = start == 0 || !EndsWithWord(text.substr(0, start));
      bool stop_space = stop == text.size() || !StartsWithWord(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t k = unicode::LastCharStart(text.substr(0, new_start));
        size_t j = k;
        if (!unicode::IsWhitespace(unicode::DecodeAt(text, &j))) break;
        new_start = k;
      }
      start = std::max(new_start, start_offset);
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t j = stop;
        if (!unicode::IsWhitespace(unicode::DecodeAt(text, &j))) break;
        stop = j;
      }
    }
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, index});
    start_offset = stop;
  }
  if (start_offset != text.size()) out->push_back({start_offset, text.size(), -1});
}

void AddedVocabulary::SafeBoundaries(std::string_view text, std::vector<size_t>* out) const {
  std::vector<std::pair<size_t, int32_t>> matches;
  RawMatches(raw_, text, &matches);
  for (auto [q, index] : matches) {
    if (q == 0) continue;
    const Token& t = tokens_[static_cast<size_t>(index)];
    if (t.lstrip || t.single_word) continue;
    size_t j = q;
    char32_t c = unicode::DecodeAt(text, &j);
    if (unicode::IsWhitespace(c) || unicode::IsAlphanumeric(c) || unicode::IsWordChar(c)) continue;
    out->push_back(q);
  }
}

}  // namespace infera::tokenizer

namespace infera::tokenizer {

size_t AddedVocabulary::SafeBoundaryReach(std::string_view text, size_t q) const {
  // Scan positions p <= q - max_len read at most up to p + max_len - 1 < q; the trie walks
  // from the positions after them are replayed to see how far they read.
  const Trie& trie = raw_;
  size_t reach = q + 1;
  const size_t n = text.size();
  size_t p = q + 1 > trie.max_len ? q + 1 - trie.max_len : 0;
  for (; p <= q && p < n; ++p) {
    if (!trie.first[static_cast<uint8_t>(text[p])]) continue;
    uint32_t node = 0;
    size_t i = p;
    for (; i < n; ++i) {
      auto it = trie.edges.find((uint64_t{node} << 8) | static_cast<uint8_t>(text[i]));
      if (it == trie.edges.end()) break;
      node = it->second;
    }
    if (i == n) return n + 1;
    reach = std::max(reach, i + 1);
  }
  return reach;
}

}  // namespace infera::tokenizer
