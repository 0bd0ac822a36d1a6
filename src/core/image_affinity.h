// ImageAffinity: which images each target served recently (doc/selection.md,
// "Image affinity").
//
// Multimodal requests cannot use token-block overlap (the image placeholder token
// is the same for every image), so the kv-aware policy routes them by image
// affinity: each target keeps an LRU of the keys of the last `capacity` images it
// served (256), and a repeat image is drawn back to a target that holds its key.
// The key is the router's own (ImageKey), never an engine's KV hash.
//
// Thread-safety: none; serialise with the selector that owns it.
//
// Example:
//   std::vector<uint64_t> keys = {ImageKey("https://x/cat.png")};
//   size_t held = affinity.CountHeld(target, keys);
//   affinity.Record(picked, keys);
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/types.h"

namespace infera::core {

// XXH3-64 (seed 0) of the reference with ASCII whitespace trimmed at both ends: the
// http(s) URL, or the whole `data:` URI (so inline bytes are content-hashed).
uint64_t ImageKey(std::string_view reference);

class ImageAffinity {
 public:
  static constexpr size_t kDefaultCapacity = 256;

  // REQUIRES: capacity_per_target > 0.
  explicit ImageAffinity(size_t capacity_per_target = kDefaultCapacity);
  ImageAffinity(const ImageAffinity&) = delete;
  ImageAffinity& operator=(const ImageAffinity&) = delete;

  // How many of `keys` the target holds (each element counted, duplicates too).
  size_t CountHeld(TargetId target, std::span<const uint64_t> keys) const;
  bool Holds(TargetId target, uint64_t key) const;
  // Marks each key as most recently served by the target, evicting the least
  // recently served keys beyond the capacity.
  void Record(TargetId target, std::span<const uint64_t> keys);
  // Keys the target holds.
  size_t Size(TargetId target) const;
  // Drops everything the target holds.
  void RemoveTarget(TargetId target);

 private:
  struct Lru {
    std::list<uint64_t> order;  // front = most recent
    absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  const Lru* Find(TargetId target) const;

  size_t capacity_;
  std::vector<Lru> targets_;  // indexed by TargetId, grown on demand
};

}  // namespace infera::core
