#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// GPT-2's byte <-> unicode table: printable Latin-1 bytes map to themselves, the
// others to U+0100 + n in byte order.
struct ByteTable {
  std::array<char32_t, 256> byte_to_char{};
  absl::flat_hash_map<char32_t, uint8_t> char_to_byte;
  ByteTable() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      char32_t c = keep ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      byte_to_char[b] = c;
      char_to_byte[c] = static_cast<uint8_t>(b);
    }
  }
};

const ByteTable& Bytes() {
  static const ByteTable* table = new ByteTable();
  return *table;
}

// Raw bytes of a byte-level token spelling, or nullopt if it has other characters.
std::optional<std::string> SpellingToBytes(std::string_view token) {
  if (unicode::ValidUtf8Prefix(token) != token.size()) return std::nullopt;
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    char32_t c = unicode::DecodeAt(token, &i);
    auto it = Bytes().char_to_byte.find(c);
    if (it == Bytes().char_to_byte.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

// Hugging Face's BPE merge queue entry: lowest rank first, then leftmost.
struct Merge {
  uint32_t rank;
  uint32_t pos;
  uint32_t new_id;
  bool operator<(const Merge& o) const {  // "less" = lower priority (max-heap)
    if (rank != o.rank) return rank > o.rank;
    return pos > o.pos;
  }
};

struct Symbol {
  uint32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;
};

struct Scratch {
  std::vector<Symbol> symbols;
  std::vector<Merge> heap;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// A per-thread, direct-mapped front of the shared word cache: a hit costs one hash and
// one compare, no lock. Slots are tagged with the model's instance number (never reused,
// unlike addresses), so one thread may use several models.
struct FrontSlot {
  uint64_t instance = 0;  // 0: empty
  size_t hash = 0;
  std::string word;
  std::vector<uint32_t> ids;
};
constexpr size_t kFrontSlots = 4096;

std::vector<FrontSlot>& ThreadFront() {
  thread_local std::vector<FrontSlot> front(kFrontSlots);
  return front;
}

std::atomic<uint64_t> g_next_instance{1};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& model,
                                                             bool byte_level,
                                                             const StreamedVocab* streamed) {
  if (!model.is_object()) return absl::InvalidArgumentError("model: object expected");
  std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") {
    return absl::InvalidArgumentError(absl::StrCat("unsupported model type '", type, "'"));
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return absl::InvalidArgumentError("model: 'vocab' object expected");
  }
  if (model.contains("dropout") && model["dropout"].is_number() &&
      model["dropout"].get<double>() > 0.0) {
    return absl::InvalidArgumentError("model: BPE dropout is not supported");
  }
  auto m = std::unique_ptr<BpeModel>(new BpeModel());
  m->instance_ = g_next_instance.fetch_add(1);
  m->byte_level_ = byte_level;
  auto opt_string = [&](const char* key) -> std::string {
    if (model.contains(key) && model[key].is_string()) return model[key].get<std::string>();
    return "";
  };
  m->byte_fallback_ = model.value("byte_fallback", false);
  m->ignore_merges_ = model.value("ignore_merges", false);
  m->fuse_unk_ = model.value("fuse_unk", false);
  m->continuing_subword_prefix_ = opt_string("continuing_subword_prefix");
  m->end_of_word_suffix_ = opt_string("end_of_word_suffix");

  if (streamed != nullptr && !streamed->error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model: ", streamed->error));
  }
  // Spelling -> id, used to resolve merges.
  absl::flat_hash_map<std::string, uint32_t> spelling;
  auto add_token = [&](const std::string& token, uint64_t id) -> absl::Status {
    // Ids index a dense table: bound them so a hostile file cannot make it huge
    // (the largest real vocabularies have a few hundred thousand tokens).
    constexpr uint64_t kMaxTokenId = uint64_t{1} << 22;
    if (id >= kMaxTokenId) {
      return absl::InvalidArgumentError(
          absl::StrCat("model: token id ", id, " too large (limit ", kMaxTokenId, ")"));
    }
    if (id >= m->id_to_token_.size()) m->id_to_token_.resize(id + 1);
    m->id_to_token_[id] = token;
    spelling[token] = static_cast<uint32_t>(id);
    return absl::OkStatus();
  };
  if (streamed != nullptr && streamed->has_vocab) {
    spelling.reserve(streamed->vocab.size());
    for (const auto& [token, id] : streamed->vocab) {
      if (absl::Status st = add_token(token, id); !st.ok()) return st;
    }
  } else {
    spelling.reserve(model["vocab"].size());
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
      if (!it.value().is_number_unsigned()) {
        return absl::InvalidArgumentError(absl::StrCat("model: bad id for token '", it.key(), "'"));
      }
      if (absl::Status st = add_token(it.key(), it.value().get<uint64_t>()); !st.ok()) return st;
    }
  }
  if (byte_level) {
    m->vocab_.reserve(spelling.size());
    for (const auto& [tok, id] : spelling) {
      if (auto bytes = SpellingToBytes(tok)) m->vocab_[*bytes] = id;
    }
  } else {
    m->vocab_ = spelling;
  }

  std::string unk = opt_string("unk_token");
  if (!unk.empty()) {
    auto it = spelling.find(unk);
    if (it != spelling.end()) m->unk_id_ = it->second;
  }

  // Merges: "a b" strings or ["a", "b"] pairs. A later duplicate overrides an earlier
  // one, as in Hugging Face (HashMap collect).
  uint32_t rank = 0;
  std::string merged;
  auto add_merge = [&](std::string_view a, std::string_view b) -> absl::Status {
    size_t prefix_len = m->continuing_subword_prefix_.size();
    if (b.size() < prefix_len) return absl::InvalidArgumentError("model: bad merge prefix");
    merged.assign(a);
    merged.append(b.substr(prefix_len));
    auto ia = spelling.find(Av(a)), ib = spelling.find(Av(b)), im = spelling.find(merged);
    if (ia == spelling.end() || ib == spelling.end() || im == spelling.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model: merge '", Av(a), " ", Av(b), "' refers to a token not in vocab"));
    }
    m->merges_[(uint64_t{ia->second} << 32) | ib->second] = (uint64_t{rank} << 32) | im->second;
    ++rank;
    return absl::OkStatus();
  };
  auto add_joined = [&](std::string_view s) -> absl::Status {
    size_t sp = s.find(' ');
    if (sp == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("model: bad merge '", Av(s), "'"));
    }
    return add_merge(s.substr(0, sp), s.substr(sp + 1));
  };
  if (streamed != nullptr && streamed->has_merges) {
    m->merges_.reserve(streamed->merges.size());
    for (const StreamedVocab::Merge& merge : streamed->merges) {
      absl::Status st =
          merge.joined ? add_joined(merge.first) : add_merge(merge.first, merge.second);
      if (!st.ok()) return st;
    }
  } else if (model.contains("merges")) {
    if (!model["merges"].is_array()) return absl::InvalidArgumentError("model: 'merges' array");
    const auto& merges = model["merges"];
    m->merges_.reserve(merges.size());
    for (const auto& entry : merges) {
      absl::Status st;
      if (entry.is_string()) {
        st = add_joined(entry.get_ref<const std::string&>());
      } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
                 entry[1].is_string()) {
        st = add_merge(entry[0].get_ref<const std::string&>(),
                       entry[1].get_ref<const std::string&>());
      } else {
        return absl::InvalidArgumentError("model: merge must be \"a b\" or [\"a\", \"b\"]");
      }
      if (!st.ok()) return st;
    }
  }

  m->byte_ids_.fill(kNone);
  m->fallback_ids_.fill(kNone);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = spelling.find(name);
    if (it != spelling.end()) m->fallback_ids_[b] = it->second;
    if (byte_level) {
      auto jt = m->vocab_.find(std::string(1, static_cast<char>(b)));
      if (jt != m->vocab_.end()) m->byte_ids_[b] = jt->second;
    }
  }
  if (!byte_level) {
    for (const auto& [tok, id] : spelling) {
      if (tok.empty() || unicode::ValidUtf8Prefix(tok) != tok.size()) continue;
      size_t i = 0;
      char32_t c = unicode::DecodeAt(tok, &i);
      if (i == tok.size()) {
        m->char_ids_[c] = id;
        if (c < 128) m->ascii_known_[c] = true;
      }
    }
    // Cutting a word between adjacent characters x, y is exact when no vocabulary
    // token contains "xy": no merge can then join the two sides (doc/tokenizer.md).
    if (m->continuing_subword_prefix_.empty() && m->end_of_word_suffix_.empty()) {
      m->split_words_ = true;
      for (const auto& [tok, id] : spelling) {
        if (tok.size() < 2 || unicode::ValidUtf8Prefix(tok) != tok.size()) continue;
        size_t i = 0;
        char32_t prev = unicode::DecodeAt(tok, &i);
        while (i < tok.size()) {
          char32_t c = unicode::DecodeAt(tok, &i);
          m->bigrams_.insert((uint64_t{prev} << 32) | c);
          if (prev < 128 && c < 128) m->ascii_bigrams_[prev * 128 + c] = true;
          prev = c;
        }
      }
    }
  }
  return m;
}

std::optional<uint32_t> BpeModel::TokenToId(std::string_view token) const {
  if (byte_level_) {
    auto bytes = SpellingToBytes(token);
    if (!bytes) return std::nullopt;
    auto it = vocab_.find(*bytes);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  auto it = vocab_.find(Av(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> BpeModel::IdToToken(uint32_t id) const {
  if (id >= id_to_token_.size() || id_to_token_[id].empty()) return std::nullopt;
  return id_to_token_[id];
}

void BpeModel::Tokenize(std::string_view word, std::vector<uint32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(Av(word));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (split_words_ && word.size() > 1) {
    // Cut between characters x, y that are both single-character tokens (so never
    // unknown or byte fallback) when no token contains "xy".
    size_t start = 0;
    size_t i = 0;
    char32_t prev = unicode::DecodeAt(word, &i);
    bool prev_known = prev < 128 ? ascii_known_[prev] : char_ids_.contains(prev);
    while (i < word.size()) {
      size_t at = i;
      char32_t c;
      bool known;
      if (static_cast<unsigned char>(word[i]) < 128) {
        c = static_cast<unsigned char>(word[i]);
        ++i;
        known = ascii_known_[c];
      } else {
        c = unicode::DecodeAt(word, &i);
        known = char_ids_.contains(c);
      }
      bool touches = prev < 128 && c < 128 ? ascii_bigrams_[prev * 128 + c]
                                           : bigrams_.contains((uint64_t{prev} << 32) | c);
      if (prev_known && known && !touches) {
        TokenizeUncached(word.substr(start, at - start), out);
        start = at;
      }
      prev = c;
      prev_known = known;
    }
    TokenizeUncached(word.substr(start), out);
    return;
  }
  TokenizeUncached(word, out);
}

void BpeModel::TokenizeUncached(std::string_view word, std::vector<uint32_t>* out) const {
  if (word.size() > kMaxCachedWordBytes) {
    MergeWord(word, out);
    return;
  }
  size_t h = absl::HashOf(Av(word));
  FrontSlot& slot = ThreadFront()[(h >> 7) % kFrontSlots];
  if (slot.instance == instance_ && slot.hash == h && slot.word == word) {
    out->insert(out->end(), slot.ids.begin(), slot.ids.end());
    return;
  }
  const size_t before = out->size();
  Shard& shard = cache_[h % kShards];
  bool found = false;
  {
    base::MutexLock lock(shard.mu);
    auto it = shard.map.find(Av(word));
    if (it != shard.map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      found = true;
    }
  }
  if (!found) {
    MergeWord(word, out);
    std::vector<uint32_t> ids(out->begin() + static_cast<ptrdiff_t>(before), out->end());
    base::MutexLock lock(shard.mu);
    if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
    shard.map.emplace(std::string(word), std::move(ids));
  }
  slot.instance = instance_;
  slot.hash = h;
  slot.word.assign(word);
  slot.ids.assign(out->begin() + static_cast<ptrdiff_t>(before), out->end());
}

void BpeModel::MergeWord(std::string_view word, std::vector<uint32_t>* out) const {
  Scratch& scratch = ThreadScratch();
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  // Pending unknown run: (id, byte length), flushed before the next known symbol. Plain
  // fields, not std::optional<pair>: g++ 12 -O3 reports a false maybe-uninitialized
  // on the optional's payload.
  bool unk = false;
  uint32_t unk_id = 0;
  uint32_t unk_len = 0;
  auto add = [&](uint32_t id, uint32_t len) {
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, len});
  };
  size_t i = 0;
  bool generic = !continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty();
  while (i < word.size()) {
    size_t start = i;
    uint32_t id = kNone;
    if (byte_level_) {
      id = byte_ids_[static_cast<uint8_t>(word[i])];
      ++i;
    } else {
      char32_t c = unicode::DecodeAt(word, &i);
      if (!generic) {
        auto it = char_ids_.find(c);
        if (it != char_ids_.end()) id = it->second;
      } else {
        std::string s(word.substr(start, i - start));
        if (start != 0) s = continuing_subword_prefix_ + s;
        if (i == word.size()) s += end_of_word_suffix_;
        auto it = vocab_.find(s);
        if (it != vocab_.end()) id = it->second;
      }
    }
    uint32_t byte_len = static_cast<uint32_t>(i - start);
    if (id != kNone) {
      if (unk) {
        add(unk_id, unk_len);
        unk = false;
      }
      add(id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t k = start; k < i; ++k)
        all &= fallback_ids_[static_cast<uint8_t>(word[k])] != kNone;
      if (all) {
        // As in Hugging Face, a pending unknown run is not flushed here.
        for (size_t k = start; k < i; ++k) add(fallback_ids_[static_cast<uint8_t>(word[k])], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (unk && fuse_unk_) {
        unk_len += byte_len;
      } else {
        if (unk) add(unk_id, unk_len);
        unk = true;
        unk_id = *unk_id_;
        unk_len = byte_len;
      }
    }
  }
  if (unk) add(unk_id, unk_len);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::vector<Merge>& heap = scratch.heap;
  heap.clear();
  auto find_merge = [&](uint32_t a, uint32_t b) -> const uint64_t* {
    auto it = merges_.find((uint64_t{a} << 32) | b);
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const uint64_t* m = find_merge(symbols[k].id, symbols[k + 1].id)) {
      heap.push_back(
          {static_cast<uint32_t>(*m >> 32), static_cast<uint32_t>(k), static_cast<uint32_t>(*m)});
    }
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    Merge top = heap.back();
    heap.pop_back();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    size_t next_pos = static_cast<size_t>(cur.next);
    Symbol right = symbols[next_pos];
    const uint64_t* m = find_merge(cur.id, right.id);
    if (m == nullptr || static_cast<uint32_t>(*m) != top.new_id) continue;
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0)
      symbols[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);
    if (cur.prev >= 0) {
      const Symbol& prev = symbols[static_cast<size_t>(cur.prev)];
      if (const uint64_t* pm = find_merge(prev.id, cur.id)) {
        heap.push_back({static_cast<uint32_t>(*pm >> 32), static_cast<uint32_t>(cur.prev),
                        static_cast<uint32_t>(*pm)});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (cur.next >= 0) {
      const Symbol& next = symbols[static_cast<size_t>(cur.next)];
      if (const uint64_t* nm = find_merge(cur.id, next.id)) {
        heap.push_back({static_cast<uint32_t>(*nm >> 32), top.pos, static_cast<uint32_t>(*nm)});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out->push_back(s.id);
  }
}

}  // namespace infera::tokenizer
