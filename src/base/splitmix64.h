// SplitMix64 (Steele, Lea, Flood 2014): the 64-bit finaliser the router mixes seeds
// and counters with. One definition for every layer: core::Random (core/clock.h) steps
// it too.
#pragma once

#include <cstdint>

namespace infera::base {

// The finaliser alone: a bijection that spreads every input bit over the output.
inline uint64_t SplitMix64Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One SplitMix64 step from state `x`: the golden-ratio increment, then the finaliser.
inline uint64_t SplitMix64(uint64_t x) { return SplitMix64Finalize(x + 0x9e3779b97f4a7c15ULL); }

}  // namespace infera::base
