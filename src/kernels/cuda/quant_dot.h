// The arithmetic of the GPU's quantized matrix products, written once for host and device.
//
// Every function here is `__host__ __device__` under nvcc and plain inline C++ under g++, so
// the CPU unit tests run the very code the CUDA kernels run. No CUDA header is needed to
// include this file from C++.
//
// The computation is the CPU's packed canonical form (kernels/cpu/matmul_internal.h), read
// straight from the GGUF layout, so a GPU product is bitwise equal to the CPU's MatMul:
//
//   Activations, per token and block b of 32 columns:
//     dx = amax / 127,  q_x = round-half-even(x * (1 / dx))  (0 when dx is 0),
//     bx = float(sum of the block's q_x) * dx.
//   Weights, per row and block b of 32 columns: small integers q_w and factors dw, mw.
//   Per (row, token), acc = 0 and then for every block b in increasing order:
//     isum = exact integer sum over the block of q_w * q_x
//     acc  = fma(float(isum), dw * dx, acc)            (dw * dx rounded once)
//     acc  = fma(mw, bx, acc)                          (types with an offset)
//   Q6_K: isum = sc_0 * i_0 + sc_1 * i_1 over the block's two halves of 16, with
//   i_h = sum (q_w - 32) * q_x and dw the super-block's d; no offset.
//
// Why the GPU can be fast with a sequential float chain: the integer sums are exact, so any
// number of threads may form them in any order (dp4a, shuffles); only the two float
// operations per block run in the fixed order, and they are few. Nothing depends on the
// batch, the grid or the GPU model: a token's result is the same alone or in a batch of 64.
//
// Exactness notes: host code must not contract `a * b + c` into an FMA (g++ in ISO C++ mode
// does not; nvcc would, hence the explicit __fmul_rn / __fmaf_rn). Division, reciprocal and
// round-to-nearest-even are IEEE-exact on both sides (nvcc's default -prec-div=true).
#pragma once

#include <stdint.h>
#include <string.h>

#include "common/host_device.h"

#if !defined(__CUDACC__)
#include <cmath>
#endif

namespace pier::cuda::quant {

// Weight types with a GPU product, numbered as in GGUF (ggml_type).
enum class QuantType : int32_t {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
};

inline constexpr int kBlock = 32;         // columns per activation block and canonical step
inline constexpr int kQuadsPerBlock = 8;  // 4-column pieces of a block, one per thread

// Whether `type` (a ggml_type number) has a GPU product.
PIER_HD bool IsQuantType(int32_t type) {
  switch (type) {
    case 2:
    case 3:
    case 6:
    case 7:
    case 8:
    case 12:
    case 13:
    case 14:
      return true;
    default:
      return false;
  }
}

// Elements per GGUF block (32, or 256 for the k-quants) and its bytes.
PIER_HD int32_t GgufBlockElements(QuantType type) {
  return static_cast<int32_t>(type) >= 12 ? 256 : 32;
}
PIER_HD int32_t GgufBlockBytes(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0:
      return 18;
    case QuantType::kQ4_1:
      return 20;
    case QuantType::kQ5_0:
      return 22;
    case QuantType::kQ5_1:
      return 24;
    case QuantType::kQ8_0:
      return 34;
    case QuantType::kQ4_K:
      return 144;
    case QuantType::kQ5_K:
      return 176;
    case QuantType::kQ6_K:
      return 210;
  }
  return 0;
}

// Bytes of one row of `n_cols` (a multiple of the type's block) in GGUF layout.
PIER_HD int64_t GgufRowBytes(QuantType type, int64_t n_cols) {
  return n_cols / GgufBlockElements(type) * GgufBlockBytes(type);
}

// ---- Exactly rounded float operations, the same bits on host and device ---------------------

PIER_HD float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

PIER_HD float FmaRn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

PIER_HD float DivRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// round-half-even(v) as an integer; |v| is at most about 127.5 here.
PIER_HD int32_t RoundHalfEven(float v) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#else
  return static_cast<int32_t>(std::nearbyint(v));
#endif
}

PIER_HD float BitsToFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  memcpy(&f, &bits, 4);
  return f;
#endif
}

// IEEE binary16 -> float, exact for every pattern (as tensor/float16.h, without C++20).
PIER_HD float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return BitsToFloat(sign);
  uint32_t e = 113;  // normalize a subnormal half into an f32 normal
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return BitsToFloat(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
}

// A byte of weights or activations, which no kernel writes while it reads them: on the GPU
// through the read-only data cache (ld.global.nc), which the compiler cannot infer once the
// pointer comes from a struct (a launch's matrix slices).
PIER_HD uint8_t LoadByte(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);
#else
  return *p;
#endif
}
PIER_HD int8_t LoadSignedByte(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return static_cast<int8_t>(__ldg(reinterpret_cast<const signed char*>(p)));
#else
  return static_cast<int8_t>(*p);
#endif
}
PIER_HD uint16_t LoadU16(const uint8_t* p) {
  return static_cast<uint16_t>(LoadByte(p) | (static_cast<uint32_t>(LoadByte(p + 1)) << 8));
}
PIER_HD uint32_t LoadU32(const uint8_t* p) {
  return LoadByte(p) | (static_cast<uint32_t>(LoadByte(p + 1)) << 8) |
         (static_cast<uint32_t>(LoadByte(p + 2)) << 16) |
         (static_cast<uint32_t>(LoadByte(p + 3)) << 24);
}
PIER_HD float LoadHalf(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }

// ---- Activations --------------------------------------------------------------------------

// One token's quantized activations on the GPU: q_x [n_cols] int8 | dx [n_blocks] f32 |
// bx [n_blocks] f32, the row padded with zeros to 16 bytes. Rows of a batch follow each other.
// Inputs are finite activations: a NaN, or a block whose largest magnitude is below ~4e-37
// (its inverse scale overflows), rounds differently on host and device (as on the CPU, whose
// nearbyint of NaN is undefined too); the forward pass never produces either from finite
// weights.
PIER_HD int64_t ActivationRowBytes(int64_t n_cols) {
  const int64_t n_blocks = n_cols / kBlock;
  return (n_cols + 8 * n_blocks + 15) / 16 * 16;
}

// The steps of quantizing one block of 32, shared by QuantizeBlock and the GPU kernel (which
// forms amax and the sum of q with warp reductions: max and integer sums are exact in any
// order).
PIER_HD float ActivationScale(float amax) { return DivRn(amax, 127.0f); }  // dx
PIER_HD float ActivationInverseScale(float dx) { return dx != 0.0f ? DivRn(1.0f, dx) : 0.0f; }
PIER_HD int32_t QuantizeValue(float x, float inverse_scale) {
  return RoundHalfEven(MulRn(x, inverse_scale));
}
PIER_HD float ActivationOffsetSum(int32_t qsum, float dx) {  // bx
  return MulRn(static_cast<float>(qsum), dx);
}

// Zeroes the padding of an activation row (after its bx), as every writer of rows does.
PIER_HD void ZeroActivationPadding(uint8_t* row, int64_t n_cols) {
  for (int64_t i = n_cols + 8 * (n_cols / kBlock); i < ActivationRowBytes(n_cols); ++i) row[i] = 0;
}

// Quantizes one block of 32 floats: q[32], *dx and *bx as in the header comment.
PIER_HD void QuantizeBlock(const float* x, int8_t* q, float* dx, float* bx) {
  float amax = 0.0f;
  for (int i = 0; i < kBlock; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const float d = ActivationScale(amax);
  const float id = ActivationInverseScale(d);
  int32_t qsum = 0;
  for (int i = 0; i < kBlock; ++i) {
    const int32_t v = QuantizeValue(x[i], id);
    q[i] = static_cast<int8_t>(v);
    qsum += v;
  }
  *dx = d;
  *bx = ActivationOffsetSum(qsum, d);
}

// ---- Weights ------------------------------------------------------------------------------

// Four consecutive weights of a block as signed bytes (q_w, or q_w - 32 for Q6_K, so that
// they fit), and the integer factor their products take (the half's scale for Q6_K, else 1).
struct WeightQuad {
  uint32_t packed;  // byte i = weight 4 * quad + i, two's complement
  int32_t scale;
};

// The 4 weights of block `b` (32 columns), elements 4 * quad .. 4 * quad + 3, of one row.
PIER_HD WeightQuad LoadWeightQuad(QuantType type, const uint8_t* row, int64_t b, int quad) {
  uint32_t packed = 0;
  int32_t scale = 1;
  const int e0 = 4 * quad;  // first element within the 32-block
  switch (type) {
    case QuantType::kQ4_0:
    case QuantType::kQ4_1:
    case QuantType::kQ5_0:
    case QuantType::kQ5_1: {
      const int bytes = GgufBlockBytes(type);
      const uint8_t* blk = row + b * bytes;
      const int qs_offset = bytes - 16;  // qs is the last 16 bytes of each legacy block
      const bool five = type == QuantType::kQ5_0 || type == QuantType::kQ5_1;
      const uint32_t qh = five ? LoadU32(blk + qs_offset - 4) : 0;
      for (int i = 0; i < 4; ++i) {
        const int e = e0 + i;
        const uint8_t byte = LoadByte(blk + qs_offset + (e & 15));
        uint32_t v = e < 16 ? (byte & 0x0fu) : (byte >> 4);
        if (five) v |= ((qh >> e) & 1u) << 4;
        packed |= v << (8 * i);
      }
      break;
    }
    case QuantType::kQ8_0: {
      const uint8_t* blk = row + b * 34;
      for (int i = 0; i < 4; ++i)
        packed |= static_cast<uint32_t>(LoadByte(blk + 2 + e0 + i)) << (8 * i);
      break;
    }
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      const bool five = type == QuantType::kQ5_K;
      const uint8_t* blk = row + (b / 8) * GgufBlockBytes(type);
      const int sub = static_cast<int>(b % 8);
      const uint8_t* qh = blk + 16;
      const uint8_t* qs = blk + (five ? 48 : 16) + 32 * (sub / 2);
      for (int i = 0; i < 4; ++i) {
        const int l = e0 + i;
        const uint32_t byte = LoadByte(qs + l);
        uint32_t v = (sub % 2 == 0) ? (byte & 0x0fu) : (byte >> 4);
        if (five) v |= ((LoadByte(qh + l) >> sub) & 1u) << 4;
        packed |= v << (8 * i);
      }
      break;
    }
    case QuantType::kQ6_K: {
      const uint8_t* blk = row + (b / 8) * 210;
      const int sub = static_cast<int>(b % 8);
      const int half = sub / 4, k = sub % 4;  // 128-element half, quarter within it
      const uint8_t* ql = blk + 64 * half + 32 * (k & 1);
      const uint8_t* qh = blk + 128 + 32 * half;
      for (int i = 0; i < 4; ++i) {
        const int l = e0 + i;
        const uint32_t byte = LoadByte(ql + l);
        const uint32_t low = k < 2 ? (byte & 0x0fu) : (byte >> 4);
        const int32_t v =
            static_cast<int32_t>(low | (((LoadByte(qh + l) >> (2 * k)) & 3u) << 4)) - 32;
        packed |= (static_cast<uint32_t>(v) & 0xffu) << (8 * i);
      }
      // Scale of the 16-element half this quad lies in (quads 0-3: first, 4-7: second).
      scale = LoadSignedByte(blk + 192 + 8 * half + 2 * k + (quad >= 4 ? 1 : 0));
      break;
    }
  }
  return WeightQuad{packed, scale};
}

// Whether the type's values carry an offset (mw): all but Q8_0 and Q6_K.
PIER_HD bool HasOffset(QuantType type) {
  return type != QuantType::kQ8_0 && type != QuantType::kQ6_K;
}

// The block's float factors: dw, and mw with has_offset (types whose values carry an offset).
struct BlockFactors {
  float dw;
  float mw;
  bool has_offset;
};

PIER_HD void ScaleMinK4(int j, const uint8_t* scales, int* scale, int* min) {
  if (j < 4) {
    *scale = LoadByte(scales + j) & 63;
    *min = LoadByte(scales + j + 4) & 63;
  } else {
    *scale = (LoadByte(scales + j + 4) & 0x0f) | ((LoadByte(scales + j - 4) >> 6) << 4);
    *min = (LoadByte(scales + j + 4) >> 4) | ((LoadByte(scales + j) >> 6) << 4);
  }
}

PIER_HD BlockFactors LoadBlockFactors(QuantType type, const uint8_t* row, int64_t b) {
  switch (type) {
    case QuantType::kQ4_0: {
      const float d = LoadHalf(row + b * 18);
      return {d, MulRn(-8.0f, d), true};
    }
    case QuantType::kQ4_1:
      return {LoadHalf(row + b * 20), LoadHalf(row + b * 20 + 2), true};
    case QuantType::kQ5_0: {
      const float d = LoadHalf(row + b * 22);
      return {d, MulRn(-16.0f, d), true};
    }
    case QuantType::kQ5_1:
      return {LoadHalf(row + b * 24), LoadHalf(row + b * 24 + 2), true};
    case QuantType::kQ8_0:
      return {LoadHalf(row + b * 34), 0.0f, false};
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      const uint8_t* blk = row + (b / 8) * GgufBlockBytes(type);
      int sc = 0, mn = 0;
      ScaleMinK4(static_cast<int>(b % 8), blk + 4, &sc, &mn);
      // Both products are exact in f32 (11-bit half times a 6-bit integer).
      const float dw = MulRn(LoadHalf(blk), static_cast<float>(sc));
      const float mw = -MulRn(LoadHalf(blk + 2), static_cast<float>(mn));
      return {dw, mw, true};
    }
    case QuantType::kQ6_K:
      return {LoadHalf(row + (b / 8) * 210 + 208), 0.0f, false};
  }
  return {0.0f, 0.0f, false};
}

// Exact sum of the 4 byte-wise products of a quad and 4 activation bytes, times its scale.
PIER_HD int32_t QuadDot(WeightQuad w, uint32_t x4) {
#if defined(__CUDA_ARCH__)
  return __dp4a(static_cast<int>(w.packed), static_cast<int>(x4), 0) * w.scale;
#else
  int32_t s = 0;
  for (int i = 0; i < 4; ++i) {
    s += static_cast<int8_t>(w.packed >> (8 * i)) * static_cast<int8_t>(x4 >> (8 * i));
  }
  return s * w.scale;
#endif
}

// One canonical step: the block's integer sum folded into the accumulator.
PIER_HD float CombineBlock(float acc, int32_t isum, BlockFactors f, float dx, float bx) {
  acc = FmaRn(static_cast<float>(isum), MulRn(f.dw, dx), acc);
  if (f.has_offset) acc = FmaRn(f.mw, bx, acc);
  return acc;
}

// ---- The whole product on the host: the golden the GPU must match -------------------------

// y[t * ldy + r] = row r of `weights` (GGUF layout) . token t of `xq` (ActivationRowBytes
// apart), in the canonical order.
inline void QuantMatMulGolden(QuantType type, const uint8_t* weights, int64_t n_rows,
                              int64_t n_cols, const uint8_t* xq, int64_t n_tokens, float* y,
                              int64_t ldy) {
  const int64_t n_blocks = n_cols / kBlock;
  const int64_t row_bytes = GgufRowBytes(type, n_cols);
  const int64_t x_bytes = ActivationRowBytes(n_cols);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const uint8_t* x = xq + t * x_bytes;
    const auto* dx = reinterpret_cast<const float*>(x + n_cols);
    const auto* bx = dx + n_blocks;
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = weights + r * row_bytes;
      float acc = 0.0f;
      for (int64_t b = 0; b < n_blocks; ++b) {
        int32_t isum = 0;
        for (int quad = 0; quad < kQuadsPerBlock; ++quad) {
          isum += QuadDot(LoadWeightQuad(type, row, b, quad), LoadU32(x + kBlock * b + 4 * quad));
        }
        acc = CombineBlock(acc, isum, LoadBlockFactors(type, row, b), dx[b], bx[b]);
      }
      y[t * ldy + r] = acc;
    }
  }
}

// Quantizes x [n_tokens, n_cols] (n_cols a multiple of 32) into xq.
inline void QuantizeActivationsGolden(const float* x, int64_t n_tokens, int64_t n_cols,
                                      uint8_t* xq) {
  const int64_t n_blocks = n_cols / kBlock;
  for (int64_t t = 0; t < n_tokens; ++t) {
    uint8_t* row = xq + t * ActivationRowBytes(n_cols);
    auto* dx = reinterpret_cast<float*>(row + n_cols);
    float* bx = dx + n_blocks;
    for (int64_t b = 0; b < n_blocks; ++b) {
      QuantizeBlock(x + t * n_cols + kBlock * b, reinterpret_cast<int8_t*>(row) + kBlock * b,
                    &dx[b], &bx[b]);
    }
    ZeroActivationPadding(row, n_cols);
  }
}

}  // namespace pier::cuda::quant
