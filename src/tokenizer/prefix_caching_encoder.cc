#include "tokenizer/prefix_caching_encoder.h"

#include <algorithm>
#include <cstring>
#include <list>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "base/mutex.h"
#include "tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

// Checkpoint lengths: 64, 128, 256, 512, then every 512 bytes. A remembered prompt is
// found through the chained hash of its first L bytes for the largest checkpoint L
// the new text shares with it; the common prefix is then extended byte by byte.
constexpr size_t kFirstCheckpoint = 64;
constexpr size_t kCheckpointStride = 512;

size_t NextCheckpoint(size_t length) {
  if (length < kFirstCheckpoint) return kFirstCheckpoint;
  if (length < kCheckpointStride) return length * 2;
  return length + kCheckpointStride;
}

// keys[i] = chained hash of text[0:L_i] for the checkpoints L_i <= text.size().
std::vector<uint64_t> CheckpointKeys(std::string_view text) {
  std::vector<uint64_t> keys;
  uint64_t chain = 0;
  size_t previous = 0;
  for (size_t length = kFirstCheckpoint; length <= text.size(); length = NextCheckpoint(length)) {
    chain = absl::HashOf(chain, absl::string_view(text.data() + previous, length - previous));
    keys.push_back(chain);
    previous = length;
  }
  return keys;
}

size_t CheckpointLength(size_t index) {
  size_t length = kFirstCheckpoint;
  for (size_t i = 0; i < index; ++i) length = NextCheckpoint(length);
  return length;
}

size_t CommonPrefix(std::string_view a, std::string_view b, size_t known_equal) {
  size_t n = std::min(a.size(), b.size());
  size_t i = known_equal;
  // Compare in 64-byte blocks first, then bytes.
  while (i + 64 <= n && std::memcmp(a.data() + i, b.data() + i, 64) == 0) i += 64;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

struct Entry {
  std::string text;
  std::vector<uint32_t> ids;
  struct Cut {
    size_t offset;    // byte offset in text: a safe boundary, or text.size() (the last)
    size_t id_count;  // ids of text[0:offset]
  };
  std::vector<Cut> cuts;       // ascending; the last one is the end of the text
  std::vector<uint64_t> keys;  // CheckpointKeys(text)
};

}  // namespace

// The remembered prompts: an LRU list of entries and a map from checkpoint key to the
// entry most recently inserted with it, guarded by mu.
class PrefixCache {
 public:
  explicit PrefixCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  struct Candidate {
    std::shared_ptr<const Entry> entry;
    size_t equal_bytes = 0;  // text[0:equal_bytes] == entry->text[0:equal_bytes], verified
  };

  // The entry sharing the largest checkpoint with `text` (keys = CheckpointKeys(text)).
  std::optional<Candidate> Find(std::string_view text, const std::vector<uint64_t>& keys) {
    std::shared_ptr<const Entry> found;
    size_t length = 0;
    {
      base::MutexLock lock(mu);
      for (size_t k = keys.size(); k-- > 0;) {
        auto it = map_.find(keys[k]);
        if (it == map_.end()) continue;
        lru_.splice(lru_.begin(), lru_, it->second);
        found = *it->second;
        length = CheckpointLength(k);
        break;
      }
    }
    if (found == nullptr) return std::nullopt;
    // Verify outside the lock (entries are immutable): a hash collision is a miss.
    if (found->text.size() < length || std::memcmp(found->text.data(), text.data(), length) != 0) {
      return std::nullopt;
    }
    return Candidate{std::move(found), length};
  }

  void Insert(std::shared_ptr<const Entry> entry) {
    base::MutexLock lock(mu);
    lru_.push_front(std::move(entry));
    auto it = lru_.begin();
    for (uint64_t key : (*it)->keys) map_[key] = it;
    while (lru_.size() > capacity_) {
      auto last = std::prev(lru_.end());
      for (uint64_t key : (*last)->keys) {
        auto m = map_.find(key);
        if (m != map_.end() && m->second == last) map_.erase(m);
      }
      lru_.pop_back();
    }
  }

  base::Mutex mu;
  PrefixCachingEncoder::Stats stats ABSL_GUARDED_BY(mu);

 private:
  using List = std::list<std::shared_ptr<const Entry>>;
  size_t capacity_;
  List lru_ ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, List::iterator> map_ ABSL_GUARDED_BY(mu);
};

PrefixCachingEncoder::PrefixCachingEncoder(const Tokenizer& tokenizer, size_t capacity)
    : tokenizer_(tokenizer), cache_(std::make_unique<PrefixCache>(capacity)) {}

PrefixCachingEncoder::~PrefixCachingEncoder() = default;

std::vector<uint32_t> PrefixCachingEncoder::Encode(std::string_view text) {
  auto entry = std::make_shared<Entry>();
  entry->keys = CheckpointKeys(text);
  std::optional<PrefixCache::Candidate> candidate = cache_->Find(text, entry->keys);

  // Reuse: the whole of an identical text, or a remembered prompt's ids up to its last
  // safe boundary q whose deciding bytes lie inside the common prefix (then q is a
  // safe boundary of `text` too, and so are the remembered ones before it).
  size_t reused_cut = 0;  // cuts of candidate->entry to copy
  bool whole = false;
  if (candidate) {
    const Entry& e = *candidate->entry;
    size_t common = CommonPrefix(text, e.text, candidate->equal_bytes);
    if (common == text.size() && common == e.text.size()) {
      whole = true;
    } else {
      // Inner cuts only (the last cut is the end of e.text, not a boundary). A cut q of
      // e is one of `text` when what decides it lies inside the common prefix.
      size_t k = e.cuts.size() - 1;
      while (k > 0 && (e.cuts[k - 1].offset >= common ||
                       tokenizer_.SafeBoundaryReach(e.text, e.cuts[k - 1].offset) > common)) {
        --k;
      }
      reused_cut = k;  // cuts[0..k) are usable
    }
  }
  size_t start = 0;
  std::vector<uint32_t>& ids = entry->ids;
  if (whole) {
    const Entry& e = *candidate->entry;
    ids = e.ids;
    entry->cuts = e.cuts;
    start = text.size();
  } else {
    std::vector<size_t> boundaries;
    size_t base = 0;
    if (reused_cut > 0) {
      const Entry& e = *candidate->entry;
      base = e.cuts[reused_cut - 1].offset;
      if (unicode::ValidUtf8Prefix(text.substr(base)) == text.size() - base) {
        entry->cuts.assign(e.cuts.begin(), e.cuts.begin() + static_cast<ptrdiff_t>(reused_cut));
        ids.reserve(e.cuts[reused_cut - 1].id_count + (text.size() - base) / 3 + 8);
        ids.assign(e.ids.begin(),
                   e.ids.begin() + static_cast<ptrdiff_t>(e.cuts[reused_cut - 1].id_count));
        // The raw scan of `text` from a match start equals the scan of the tail.
        boundaries = tokenizer_.SafeBoundaries(text.substr(base));
        start = base;
      } else {
        reused_cut = 0;  // invalid UTF-8 in the tail: the text has no safe boundaries
      }
    }
    if (reused_cut == 0) {
      base = 0;
      ids.reserve(text.size() / 3 + 8);
      boundaries = tokenizer_.SafeBoundaries(text);
    }
    for (size_t b : boundaries) {
      const size_t q = base + b;
      tokenizer_.EncodeAppend(text.substr(start, q - start), &ids);
      entry->cuts.push_back({q, ids.size()});
      start = q;
    }
    tokenizer_.EncodeAppend(text.substr(start), &ids);
    entry->cuts.push_back({text.size(), ids.size()});
    start = reused_cut > 0 ? base : 0;
  }
  std::vector<uint32_t> result = ids;
  entry->text.assign(text);
  {
    base::MutexLock lock(cache_->mu);
    ++cache_->stats.calls;
    if (whole || reused_cut > 0) ++cache_->stats.prefix_hits;
    cache_->stats.reused_bytes += start;
    cache_->stats.tokenized_bytes += text.size() - start;
  }
  // A text shorter than the first checkpoint cannot be found again: not worth a slot.
  if (!entry->keys.empty()) cache_->Insert(std::move(entry));
  return result;
}

PrefixCachingEncoder::Stats PrefixCachingEncoder::stats() const {
  base::MutexLock lock(cache_->mu);
  return cache_->stats;
}

}  // namespace infera::tokenizer
