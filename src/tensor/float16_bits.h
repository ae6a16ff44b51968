// f32 -> IEEE half rounding on bit patterns, written once for the host (tensor/float16.h's
// Fp32ToFp16) and the GPU (kernels/cuda/attention_math.h's FloatToHalf, which writes K/V
// halves): both must give the same bits. Plain integer C++17 under PIER_HD
// (common/host_device.h), so nvcc compiles it for the device too. Pure; thread-safe.
#pragma once

#include <stdint.h>

#include "common/host_device.h"

namespace pier {

// The half nearest the f32 whose bits are `bits` (ties to even, as ggml does); overflow gives
// an infinity and a NaN a quiet NaN of the same sign.
PIER_HD uint16_t Fp32BitsToFp16(uint32_t bits) {
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN -> quiet NaN
  if (abs >= 0x47800000u) {                      // >= 65536: beyond the largest half
    // Values that round below 65520 are handled as normals below; the rest overflow.
    return sign | 0x7c00u;
  }
  if (abs < 0x38800000u) {               // below 2^-14: a half subnormal or zero
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25)
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14 + (113 - exponent) - 1 ... in [14, 24]
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t half = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into inf
  return sign | static_cast<uint16_t>(half);
}

}  // namespace pier
