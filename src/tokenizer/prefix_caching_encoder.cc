#include "tokenizer/prefix_caching_encoder.h"

#include <list>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"

namespace infera::tokenizer {
namespace {

// Chained hash of the text up to a boundary: combines the previous chain value with
// the segment since the previous boundary, so all boundaries cost O(text) together.
uint64_t Chain(uint64_t previous, std::string_view segment, bool is_end) {
  return absl::HashOf(previous, absl::string_view(segment.data(), segment.size()), is_end);
}

struct Entry {
  std::string text;
  std::vector<uint32_t> ids;
  struct Cut {
    size_t offset;    // byte offset in text (text.size() for the end)
    size_t id_count;  // ids of text[0:offset]
    uint64_t key;     // chained hash
  };
  std::vector<Cut> cuts;  // ascending; the last one is the end of the text
};

}  // namespace

// The remembered prompts: an LRU list of entries and a map from chained boundary
// hash to (entry, cut index). Guarded by mu.
class PrefixCache {
 public:
  explicit PrefixCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  struct Hit {
    std::shared_ptr<const Entry> entry;
    size_t cut = 0;
  };

  // The longest remembered prefix among `keys` (ascending by offset; keys[i] is the
  // chained hash of text[0:offsets[i]]) whose text really equals text[0:offset].
  std::optional<Hit> Find(std::string_view text, const std::vector<Entry::Cut>& cuts) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t k = cuts.size(); k-- > 0;) {
      auto it = map_.find(cuts[k].key);
      if (it == map_.end()) continue;
      auto& [entry_it, cut_index] = it->second;
      const Entry& e = **entry_it;
      const Entry::Cut& c = e.cuts[cut_index];
      if (c.offset != cuts[k].offset || e.text.size() < c.offset ||
          std::string_view(e.text).substr(0, c.offset) != text.substr(0, c.offset)) {
        continue;  // hash collision
      }
      lru_.splice(lru_.begin(), lru_, entry_it);
      return Hit{*entry_it, cut_index};
    }
    return std::nullopt;
  }

  void Insert(std::shared_ptr<const Entry> entry) {
    std::lock_guard<std::mutex> lock(mu);
    lru_.push_front(entry);
    auto it = lru_.begin();
    for (size_t k = 0; k < entry->cuts.size(); ++k) map_[entry->cuts[k].key] = {it, k};
    while (lru_.size() > capacity_) {
      auto last = std::prev(lru_.end());
      for (const auto& c : (*last)->cuts) {
        auto m = map_.find(c.key);
        if (m != map_.end() && m->second.first == last) map_.erase(m);
      }
      lru_.pop_back();
    }
  }

  std::mutex mu;
  PrefixCachingEncoder::Stats stats;

 private:
  using List = std::list<std::shared_ptr<const Entry>>;
  size_t capacity_;
  List lru_;
  absl::flat_hash_map<uint64_t, std::pair<List::iterator, size_t>> map_;
};

PrefixCachingEncoder::PrefixCachingEncoder(const Tokenizer& tokenizer, size_t capacity)
    : tokenizer_(tokenizer), cache_(std::make_unique<PrefixCache>(capacity)) {}

PrefixCachingEncoder::~PrefixCachingEncoder() = default;

std::vector<uint32_t> PrefixCachingEncoder::Encode(std::string_view text) {
  std::vector<size_t> boundaries = tokenizer_.SafeBoundaries(text);
  // Boundary keys: every safe boundary, then the end of the text.
  std::vector<Entry::Cut> cuts;
  cuts.reserve(boundaries.size() + 1);
  uint64_t chain = 0;
  size_t previous = 0;
  for (size_t q : boundaries) {
    chain = Chain(chain, text.substr(previous, q - previous), false);
    cuts.push_back({q, 0, chain});
    previous = q;
  }
  cuts.push_back({text.size(), 0, Chain(chain, text.substr(previous), true)});

  std::optional<PrefixCache::Hit> hit = cache_->Find(text, cuts);
  auto entry = std::make_shared<Entry>();
  std::vector<uint32_t>& ids = entry->ids;
  size_t first_cut = 0;  // index in cuts of the first boundary not yet covered
  size_t start = 0;
  if (hit) {
    const Entry::Cut& c = hit->entry->cuts[hit->cut];
    ids.reserve(c.id_count + (text.size() - c.offset) / 3 + 8);
    ids.assign(hit->entry->ids.begin(),
               hit->entry->ids.begin() + static_cast<ptrdiff_t>(c.id_count));
    // The hit's cuts up to c are ours too (same text up to c.offset).
    while (first_cut < cuts.size() && cuts[first_cut].offset <= c.offset) {
      cuts[first_cut].id_count = hit->entry->cuts[first_cut].id_count;
      ++first_cut;
    }
    start = c.offset;
  } else {
    ids.reserve(text.size() / 3 + 8);
  }
  for (size_t k = first_cut; k < cuts.size(); ++k) {
    tokenizer_.EncodeAppend(text.substr(start, cuts[k].offset - start), &ids);
    cuts[k].id_count = ids.size();
    start = cuts[k].offset;
  }
  std::vector<uint32_t> result = ids;
  entry->text.assign(text);
  entry->cuts = std::move(cuts);
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    ++cache_->stats.calls;
    if (hit) {
      ++cache_->stats.prefix_hits;
      cache_->stats.reused_bytes += hit->entry->cuts[hit->cut].offset;
      cache_->stats.tokenized_bytes += text.size() - hit->entry->cuts[hit->cut].offset;
    } else {
      cache_->stats.tokenized_bytes += text.size();
    }
  }
  cache_->Insert(std::move(entry));
  return result;
}

PrefixCachingEncoder::Stats PrefixCachingEncoder::stats() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return cache_->stats;
}

}  // namespace infera::tokenizer
