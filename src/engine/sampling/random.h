// Xoshiro256StarStar: the per-request random generator of the sampler.
//
// xoshiro256** (Blackman and Vigna, 2018) with its state filled from the seed by splitmix64, as
// its authors recommend. Both are defined bit for bit by integer operations, so a seed gives the
// same stream on every machine, compiler and standard library (std::uniform_real_distribution
// does not promise that). Not cryptographic.
// Thread-safety: a plain value; one owner at a time.
#pragma once

#include <array>
#include <cstdint>

namespace pier::sampling {

// One step of splitmix64: advances *state and returns the next output.
inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Xoshiro256StarStar {
 public:
  explicit Xoshiro256StarStar(uint64_t seed) {
    uint64_t sm = seed;
    for (uint64_t& word : state_) word = SplitMix64(&sm);
  }
  // Starts from an explicit state (for the published test vectors); not all zero.
  explicit Xoshiro256StarStar(const std::array<uint64_t, 4>& state) : state_(state) {}

  uint64_t Next() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits: exactly k * 2^-53 for k drawn from [0, 2^53).
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  std::array<uint64_t, 4> state_;
};

}  // namespace pier::sampling
