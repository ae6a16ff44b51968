// The per-token arithmetic of the GPU forward pass, written once for host and device: the
// CPU's row operations (kernels/cpu/row_ops.h) and its softmax exponential
// (kernels/cpu/attention_lanes.h), operation for operation, so the GPU's results are the
// CPU's bits. `__host__ __device__` under nvcc, plain inline C++ under g++; no CUDA header
// is needed to include it.
//
// Every float operation is a plain IEEE add, multiply, divide or square root in the order
// written: the CUDA kernels build with --fmad=false, so nvcc contracts nothing into an FMA
// (the CPU files build without contraction too), and division and sqrt are IEEE-exact on
// both sides (nvcc's default -prec-div and -prec-sqrt).
//
//   RmsNorm:  lanes l = 0..7 sum x[i]^2 over i = l mod 8 in order (a multiply, then an add);
//             sum = (a0 + a2) + (a1 + a3) with a_l = v_l + v_{l+4};
//             y[i] = x[i] * (1 / sqrt(sum / n + eps)) * w[i]
//   SiluMul:  g * sigmoid(g) * u, sigmoid(z) = (z >= 0 ? 1 : e) / (1 + e), e = Exp(-|z|)
//   Rope:     (x0 c - x1 s, x0 s + x1 c) from a host-made (cos, sin) table
//   Exp:      attention_lanes.h's Cody-Waite reduction and degree-7 polynomial
//   Embedding rows: tensor/dequantize.cpp's per-type formulas.
#pragma once

#include <stdint.h>
#include <string.h>

#include "kernels/cuda/quant_dot.h"

namespace pier::cuda::rowmath {

PIER_HD uint32_t FloatToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return bits;
#endif
}

PIER_HD float Sqrt(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

// ---- Exp (attention_lanes.h) -------------------------------------------------------------

inline constexpr float kExpMin = -87.3f;
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpRound = 12582912.0f;  // 1.5 * 2^23
inline constexpr uint32_t kExpRoundBits = 0x4b400000u;
inline constexpr float kExpLn2Hi = 0.693359375f;
inline constexpr float kExpLn2Lo = -2.12194440e-4f;
inline constexpr float kExpP0 = 1.9875691500e-4f;
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;

// e^x for x <= 0 (0 below kExpMin, NaN for NaN): the CPU's attention::Exp, the same bits.
PIER_HD float Exp(float x) {
  const float xc = kExpMin > x ? kExpMin : x;
  const float t = xc * kExpLog2e + kExpRound;
  const float n = t - kExpRound;
  const float r = (xc - n * kExpLn2Hi) - n * kExpLn2Lo;
  float y = kExpP0 * r + kExpP1;
  y = y * r + kExpP2;
  y = y * r + kExpP3;
  y = y * r + kExpP4;
  y = y * r + kExpP5;
  y = y * (r * r);
  y = y + r;
  y = y + 1.0f;
  const uint32_t n_bits = FloatToBits(t) - kExpRoundBits;
  const float two_n = quant::BitsToFloat((n_bits + 127u) << 23);
  const float e = y * two_n;
  return x < kExpMin ? 0.0f : e;
}

// ---- Row operations (row_ops.cpp) ----------------------------------------------------------

PIER_HD float Sigmoid(float z) {
  const float e = Exp(z < 0.0f ? z : -z);
  return (z >= 0.0f ? 1.0f : e) / (1.0f + e);
}

PIER_HD float SiluMul(float g, float u) { return g * Sigmoid(g) * u; }

// Sum of the 8 canonical lanes: (v0 + v4 + (v2 + v6)) + (v1 + v5 + (v3 + v7)) as row_ops' Hsum8.
PIER_HD float Hsum8(const float* v) {
  const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
  return (a0 + a2) + (a1 + a3);
}

// Lane l's part of the sum of squares: x[i]^2 over i = l, l + 8, ... < n, in order.
PIER_HD float SumSquaresLane(const float* x, int64_t n, int lane) {
  float acc = 0.0f;
  for (int64_t i = lane; i < n; i += 8) acc = acc + x[i] * x[i];
  return acc;
}

PIER_HD float RmsScale(float sum_sq, int64_t n, float eps) {
  return 1.0f / Sqrt(sum_sq / static_cast<float>(n) + eps);
}

PIER_HD float RmsApply(float x, float scale, float weight) { return x * scale * weight; }

// One rotated pair.
PIER_HD void RopePair(float* x0, float* x1, float c, float s) {
  const float a = *x0, b = *x1;
  *x0 = a * c - b * s;
  *x1 = a * s + b * c;
}

// ---- Embedding rows (tensor/dequantize.cpp) -----------------------------------------------

// Element k of a GGUF row of `type` as f32, with the reference dequantization's operations.
PIER_HD float DequantizeElement(quant::QuantType type, const uint8_t* row, int64_t k) {
  using quant::LoadHalf;
  using quant::QuantType;
  switch (type) {
    case QuantType::kQ4_0:
    case QuantType::kQ4_1:
    case QuantType::kQ5_0:
    case QuantType::kQ5_1: {
      const int bytes = quant::GgufBlockBytes(type);
      const uint8_t* blk = row + (k / 32) * bytes;
      const int e = static_cast<int>(k % 32);
      const bool five = type == QuantType::kQ5_0 || type == QuantType::kQ5_1;
      const uint8_t byte = blk[bytes - 16 + (e & 15)];
      int q = e < 16 ? (byte & 0x0f) : (byte >> 4);
      if (five) q |= static_cast<int>((quant::LoadU32(blk + bytes - 20) >> e) & 1u) << 4;
      const float d = LoadHalf(blk);
      if (type == QuantType::kQ4_0) return static_cast<float>(q - 8) * d;
      if (type == QuantType::kQ5_0) return static_cast<float>(q - 16) * d;
      return static_cast<float>(q) * d + LoadHalf(blk + 2);
    }
    case QuantType::kQ8_0: {
      const uint8_t* blk = row + (k / 32) * 34;
      return static_cast<float>(static_cast<int8_t>(blk[2 + k % 32])) * LoadHalf(blk);
    }
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      const bool five = type == QuantType::kQ5_K;
      const uint8_t* blk = row + (k / 256) * quant::GgufBlockBytes(type);
      const int sub = static_cast<int>(k % 256) / 32, l = static_cast<int>(k % 32);
      int sc = 0, mn = 0;
      quant::ScaleMinK4(sub, blk + 4, &sc, &mn);
      const uint8_t* qs = blk + (five ? 48 : 16) + 32 * (sub / 2);
      int q = sub % 2 == 0 ? (qs[l] & 0x0f) : (qs[l] >> 4);
      if (five && ((blk[16 + l] >> sub) & 1u)) q += 16;
      const float d1 = LoadHalf(blk) * static_cast<float>(sc);
      const float m1 = LoadHalf(blk + 2) * static_cast<float>(mn);
      return d1 * static_cast<float>(q) - m1;
    }
    case QuantType::kQ6_K: {
      const uint8_t* blk = row + (k / 256) * 210;
      const int within = static_cast<int>(k % 256);
      const int half = within / 128, kq = (within % 128) / 32, l = within % 32;
      const uint8_t* ql = blk + 64 * half + 32 * (kq & 1);
      const uint8_t* qh = blk + 128 + 32 * half;
      const int low = kq < 2 ? (ql[l] & 0x0f) : (ql[l] >> 4);
      const int q = (low | (((qh[l] >> (2 * kq)) & 3) << 4)) - 32;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
      const float d = LoadHalf(blk + 208);
      return d * static_cast<float>(sc[8 * half + l / 16 + 2 * kq]) * static_cast<float>(q);
    }
  }
  return 0.0f;
}

// Element k of an embedding row of `type`: F32 (0), F16 (1) or a quant_dot.h type.
PIER_HD float EmbeddingElement(int32_t type, const uint8_t* row, int64_t k) {
  if (type == 0) {
    float v;
    memcpy(&v, row + 4 * k, 4);
    return v;
  }
  if (type == 1) return quant::HalfToFloat(quant::LoadU16(row + 2 * k));
  return DequantizeElement(static_cast<quant::QuantType>(type), row, k);
}

// ---- The operations on the host: the goldens the GPU kernels must match ------------------

inline void AddRmsNormGolden(float* x, const float* add, const float* weight, int64_t n_tokens,
                             int64_t n, float eps, float* y, uint8_t* xq) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* xt = x + t * n;
    if (add != nullptr) {
      for (int64_t i = 0; i < n; ++i) xt[i] = xt[i] + add[t * n + i];
    }
    float lanes[8];
    for (int l = 0; l < 8; ++l) lanes[l] = SumSquaresLane(xt, n, l);
    const float scale = RmsScale(Hsum8(lanes), n, eps);
    float block[quant::kBlock];
    uint8_t* row = xq != nullptr ? xq + t * quant::ActivationRowBytes(n) : nullptr;
    auto* factors = row != nullptr ? reinterpret_cast<float*>(row + n) : nullptr;
    for (int64_t b = 0; b < n / quant::kBlock; ++b) {
      for (int i = 0; i < quant::kBlock; ++i) {
        const int64_t k = quant::kBlock * b + i;
        block[i] = RmsApply(xt[k], scale, weight[k]);
        if (y != nullptr) y[t * n + k] = block[i];
      }
      if (row != nullptr) {
        quant::QuantizeBlock(block, reinterpret_cast<int8_t*>(row) + quant::kBlock * b, &factors[b],
                             &factors[n / quant::kBlock + b]);
      }
    }
    if (row != nullptr) quant::ZeroActivationPadding(row, n);
  }
}

inline void SiluMulGolden(const float* gate, const float* up, int64_t n_tokens, int64_t n, float* h,
                          uint8_t* xq) {
  float block[quant::kBlock];
  for (int64_t t = 0; t < n_tokens; ++t) {
    uint8_t* row = xq != nullptr ? xq + t * quant::ActivationRowBytes(n) : nullptr;
    auto* factors = row != nullptr ? reinterpret_cast<float*>(row + n) : nullptr;
    for (int64_t b = 0; b < n / quant::kBlock; ++b) {
      for (int i = 0; i < quant::kBlock; ++i) {
        const int64_t k = t * n + quant::kBlock * b + i;
        block[i] = SiluMul(gate[k], up[k]);
        if (h != nullptr) h[k] = block[i];
      }
      if (row != nullptr) {
        quant::QuantizeBlock(block, reinterpret_cast<int8_t*>(row) + quant::kBlock * b, &factors[b],
                             &factors[n / quant::kBlock + b]);
      }
    }
    if (row != nullptr) quant::ZeroActivationPadding(row, n);
  }
}

inline void RopeGolden(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                       bool neox, const float* cos_sin) {
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float* cs = cos_sin + (t * half + i) * 2;
        if (neox) {
          RopePair(v + i, v + i + half, cs[0], cs[1]);
        } else {
          RopePair(v + 2 * i, v + 2 * i + 1, cs[0], cs[1]);
        }
      }
    }
  }
}

// The lowest index among the largest values; -1 when the row holds a NaN.
inline int32_t ArgmaxGolden(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (row[k] != row[k]) return -1;
    if (row[k] > row[best]) best = static_cast<int32_t>(k);
  }
  return best;
}

}  // namespace pier::cuda::rowmath
