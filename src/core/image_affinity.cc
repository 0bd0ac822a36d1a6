#include "core/image_affinity.h"

#include <xxhash.h>

#include <cassert>

namespace infera::core {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

uint64_t ImageKey(std::string_view reference) {
  while (!reference.empty() && IsAsciiSpace(reference.front())) reference.remove_prefix(1);
  while (!reference.empty() && IsAsciiSpace(reference.back())) reference.remove_suffix(1);
  return XXH3_64bits_withSeed(reference.data(), reference.size(), 0);
}

ImageAffinity::ImageAffinity(size_t capacity_per_target) : capacity_(capacity_per_target) {
  assert(capacity_per_target > 0);
}

const ImageAffinity::Lru* ImageAffinity::Find(TargetId target) const {
  return target < targets_.size() ? &targets_[target] : nullptr;
}

bool ImageAffinity::Holds(TargetId target, uint64_t key) const {
  const Lru* lru = Find(target);
  return lru != nullptr && lru->where.contains(key);
}

size_t ImageAffinity::CountHeld(TargetId target, std::span<const uint64_t> keys) const {
  const Lru* lru = Find(target);
  if (lru == nullptr || lru->where.empty()) return 0;
  size_t held = 0;
  for (uint64_t key : keys) held += lru->where.contains(key) ? 1 : 0;
  return held;
}

void ImageAffinity::Record(TargetId target, std::span<const uint64_t> keys) {
  if (keys.empty()) return;
  if (target >= targets_.size()) targets_.resize(static_cast<size_t>(target) + 1);
  Lru& lru = targets_[target];
  for (uint64_t key : keys) {
    auto it = lru.where.find(key);
    if (it != lru.where.end()) {
      lru.order.splice(lru.order.begin(), lru.order, it->second);  // now most recent
      continue;
    }
    lru.order.push_front(key);
    lru.where.emplace(key, lru.order.begin());
    if (lru.order.size() > capacity_) {
      lru.where.erase(lru.order.back());
      lru.order.pop_back();
    }
  }
}

size_t ImageAffinity::Size(TargetId target) const {
  const Lru* lru = Find(target);
  return lru ? lru->order.size() : 0;
}

void ImageAffinity::RemoveTarget(TargetId target) {
  if (target < targets_.size()) targets_[target] = Lru{};
}

}  // namespace infera::core
