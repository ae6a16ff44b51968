// IEEE half (f16) and bfloat16 (bf16) conversions to and from f32.
//
// Scalar, exact reference conversions: f16 -> f32 and bf16 -> f32 are exact
// for every bit pattern (subnormals, infinities and NaNs included); f32 -> f16
// and f32 -> bf16 round to nearest even, as ggml does. Pure functions; thread-safe.
#pragma once

#include <bit>
#include <cstdint>

#include "tensor/float16_bits.h"

namespace pier {

inline float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN (payload kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // 112 = 127 - 15
  } else if (mantissa == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal half: normalize the mantissa into an f32 normal.
    int32_t e = 113;  // exponent of 2^-14 in f32 bias, before the shifts below
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

// Rounds to nearest even (tensor/float16_bits.h, which the GPU's K/V writes share).
inline uint16_t Fp32ToFp16(float f) { return Fp32BitsToFp16(std::bit_cast<uint32_t>(f)); }

inline float Bf16ToFp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t Fp32ToBf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 64u);  // NaN -> quiet NaN
  }
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace pier
