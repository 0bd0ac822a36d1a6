// PrefixCachingEncoder: encodes rendered chat prompts (no special tokens added),
// reusing the ids of recently seen prompts that share a prefix with the new one.
//
// Multi-turn chats and agent loops resend the same conversation with a new turn
// appended. The encoder remembers up to `capacity` recent prompts with their ids and
// their safe boundaries (Tokenizer::SafeBoundaries: starts of added tokens such as
// <|im_start|> that split the encoding exactly). A new prompt whose text up to one of
// its own safe boundaries equals a remembered prompt's text reuses those ids and
// tokenizes only the tail from that boundary.
//
// Contract: Encode(text) == tokenizer.Encode(text, false), always, whatever the cache
// holds. Thread-safety: all methods may be called concurrently (one short internal
// mutex around the cache; tokenizing happens outside it).
//
// Usage:
//   PrefixCachingEncoder enc(*tokenizer, /*capacity=*/256);
//   std::vector<uint32_t> ids = enc.Encode(rendered_prompt);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace infera::tokenizer {

class PrefixCache;

class PrefixCachingEncoder {
 public:
  // REQUIRES: `tokenizer` outlives this encoder. capacity = prompts remembered (LRU).
  PrefixCachingEncoder(const Tokenizer& tokenizer, size_t capacity);
  ~PrefixCachingEncoder();
  PrefixCachingEncoder(const PrefixCachingEncoder&) = delete;
  PrefixCachingEncoder& operator=(const PrefixCachingEncoder&) = delete;

  // Ids of `rendered_text`, identical to tokenizer.Encode(rendered_text, false).
  std::vector<uint32_t> Encode(std::string_view rendered_text);

  struct Stats {
    uint64_t calls = 0;
    uint64_t prefix_hits = 0;      // calls that reused a remembered prefix
    uint64_t reused_bytes = 0;     // text bytes not re-tokenized thanks to hits
    uint64_t tokenized_bytes = 0;  // text bytes tokenized
  };
  Stats stats() const;

 private:
  const Tokenizer& tokenizer_;
  std::unique_ptr<PrefixCache> cache_;
};

}  // namespace infera::tokenizer
