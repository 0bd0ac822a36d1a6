// BpeModel: the `model` section of tokenizer.json for type BPE — vocab, merges (both
// "a b" strings and ["a", "b"] pairs), byte_fallback (<0xNN> tokens), unk_token and
// fuse_unk, ignore_merges, continuing_subword_prefix / end_of_word_suffix.
//
// Merging follows Hugging Face's Word::merge_all exactly: repeatedly apply the pair
// with the lowest merge rank, leftmost first. Byte-level models (a ByteLevel
// pre-tokenizer) are stored keyed by raw bytes, so words are raw bytes and the
// byte-to-unicode mapping costs nothing at encode time.
//
// Thread-safety: immutable after FromJson apart from the word -> ids cache, which is
// sharded and mutex-protected; Tokenize may run concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "nlohmann/json.hpp"

namespace infera::tokenizer {

// model.vocab and model.merges of a tokenizer.json read by a streaming parser instead of
// into the JSON document (they are most of the file): entries in file order.
struct StreamedVocab {
  bool has_vocab = false;   // the document's model.vocab is an empty placeholder
  bool has_merges = false;  // the document's model.merges is an empty placeholder
  std::vector<std::pair<std::string, uint64_t>> vocab;
  // A merge: "a b" (joined, the whole string in first) or ["a", "b"].
  struct Merge {
    std::string first;
    std::string second;
    bool joined = false;
  };
  std::vector<Merge> merges;
  std::string error;  // the first malformed entry, if any
};

class BpeModel {
 public:
  // `streamed`, when given, holds the vocab and/or merges that `model` only has as
  // placeholders.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(
      const nlohmann::json& model, bool byte_level, const StreamedVocab* streamed = nullptr);

  // Appends the ids of one pre-tokenized word (raw bytes for byte-level models).
  // REQUIRES: word is non-empty; valid UTF-8 unless byte-level.
  void Tokenize(std::string_view word, std::vector<uint32_t>* out) const;

  // Lookups in tokenizer.json spelling (byte-level tokens as mapped characters).
  std::optional<uint32_t> TokenToId(std::string_view token) const;
  std::optional<std::string> IdToToken(uint32_t id) const;
  size_t vocab_size() const { return id_to_token_.size(); }

 private:
  BpeModel() = default;
  void TokenizeUncached(std::string_view word, std::vector<uint32_t>* out) const;
  void MergeWord(std::string_view word, std::vector<uint32_t>* out) const;

  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  std::optional<uint32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;

  // Internal spelling (raw bytes for byte-level) -> id.
  absl::flat_hash_map<std::string, uint32_t> vocab_;
  std::vector<std::string> id_to_token_;  // tokenizer.json spelling, "" for holes
  // (left id << 32 | right id) -> (rank << 32 | merged id).
  absl::flat_hash_map<uint64_t, uint64_t> merges_;
  // Fast initial symbols: byte -> id (byte-level) or <0xNN> id (byte fallback);
  // kNone when absent.
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  std::array<uint32_t, 256> byte_ids_{};
  std::array<uint32_t, 256> fallback_ids_{};
  absl::flat_hash_map<char32_t, uint32_t> char_ids_;  // single-character tokens
  // Non-byte-level words are cut between characters that never touch inside a token
  // (see Tokenize): the adjacent character pairs of all vocabulary tokens.
  bool split_words_ = false;
  absl::flat_hash_set<uint64_t> bigrams_;
  // The same two facts for ASCII characters, as tables: char_ids_ has c; bigrams_ has
  // (x, y) at x * 128 + y.
  std::array<bool, 128> ascii_known_{};
  std::vector<bool> ascii_bigrams_ = std::vector<bool>(128 * 128);

  // Tags this model's entries in the per-thread front cache (bpe_model.cc).
  uint64_t instance_ = 0;
  // Word -> ids cache, sharded, behind a per-thread direct-mapped front.
  struct Shard {
    base::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<uint32_t>> map ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 16384;
  static constexpr size_t kMaxCachedWordBytes = 128;
  mutable std::array<Shard, kShards> cache_;
};

}  // namespace infera::tokenizer
