// Random GGUF-layout weight matrices and activations for the GPU product's tests (the unit
// test of its host arithmetic and the GPU test, which must run on a machine with nothing
// installed: header-only, no Pier library needed).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/quant_dot.h"
#include "tensor/float16.h"

namespace pier::cuda::testing {

using quant::QuantType;

inline constexpr QuantType kAllQuantTypes[] = {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0,
                                               QuantType::kQ5_1, QuantType::kQ8_0, QuantType::kQ4_K,
                                               QuantType::kQ5_K, QuantType::kQ6_K};

inline const char* QuantTypeName(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0:
      return "Q4_0";
    case QuantType::kQ4_1:
      return "Q4_1";
    case QuantType::kQ5_0:
      return "Q5_0";
    case QuantType::kQ5_1:
      return "Q5_1";
    case QuantType::kQ8_0:
      return "Q8_0";
    case QuantType::kQ4_K:
      return "Q4_K";
    case QuantType::kQ5_K:
      return "Q5_K";
    case QuantType::kQ6_K:
      return "Q6_K";
  }
  return "?";
}

// n_rows rows of n_cols in `type`'s GGUF layout: random bytes, every f16 scale field
// overwritten by a modest random value (random bits could be inf or NaN).
inline std::vector<uint8_t> RandomGgufMatrix(QuantType type, int64_t n_rows, int64_t n_cols,
                                             uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<uint8_t> bytes(static_cast<size_t>(quant::GgufRowBytes(type, n_cols) * n_rows));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
  auto put_half = [&](size_t offset, float v) {
    const uint16_t h = Fp32ToFp16(v);
    std::memcpy(&bytes[offset], &h, 2);
  };
  const size_t block_bytes = static_cast<size_t>(quant::GgufBlockBytes(type));
  for (size_t base = 0; base < bytes.size(); base += block_bytes) {
    switch (type) {
      case QuantType::kQ4_0:
      case QuantType::kQ5_0:
      case QuantType::kQ8_0:
        put_half(base, scale(rng));
        break;
      case QuantType::kQ4_1:
      case QuantType::kQ5_1:
        put_half(base, scale(rng));
        put_half(base + 2, -16.0f * scale(rng) * value(rng));
        break;
      case QuantType::kQ4_K:
      case QuantType::kQ5_K:
        put_half(base, scale(rng) / 32);
        put_half(base + 2, scale(rng) / 32);
        break;
      case QuantType::kQ6_K:
        put_half(base + 208, scale(rng) / 64);
        break;
    }
  }
  return bytes;
}

// Normal activations with an outlier every 97 values (as real ones have) and, when asked,
// one all-zero block per token (its scale is 0).
inline std::vector<float> RandomActivations(int64_t n_tokens, int64_t n_cols, uint32_t seed,
                                            bool zero_block = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_tokens * n_cols));
  for (float& v : x) v = value(rng);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 20.0f;
  if (zero_block && n_cols >= 64) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::memset(&x[static_cast<size_t>(t * n_cols + 32)], 0, 32 * sizeof(float));
    }
  }
  return x;
}

inline bool SameBits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

}  // namespace pier::cuda::testing
