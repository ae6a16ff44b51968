// Internals of MatMul shared by its scalar and SIMD paths, and exposed to tests.
//
// The canonical computation (every path produces these exact bits):
//  * Activations X[t, :] are quantized per block of 32: d = amax / 127,
//    q = round-half-even(x * (1 / d)), and per lane l (elements 4l..4l+3 of the
//    block) sx[l] = float(sum of those 4 q) * d.
//  * Each weight row is read per block of 32 as small integers q_w (u8, or s8
//    for Q8_0) and two 8-lane vectors dw and mw, constant over lanes 0-3 (elements
//    0-15) and over lanes 4-7 (elements 16-31), so that w[k] = dw * q_w[k] + mw.
//  * Lane l of a block holds the exact integer sum isum_l of q_w * q_x over
//    elements 4l..4l+3; per block, in order:
//      acc[l] = fma(float(isum_l) * d_x, dw[l], acc[l])
//      acc[l] = fma(mw[l], sx[l], acc[l])      (types with offsets only)
//  * y = Hsum8(acc): lanes (l, l+4) added, then (l, l+2), then (0, 1).
// Integer sums are exact, so the SIMD paths (which form them with maddubs/madd or
// VNNI) agree bit for bit with the scalar path. Float weights (F32/F16/BF16) use
// the same 8 lanes: acc[k mod 8] = fma(w[k], x[k], acc[k mod 8]), zero-padded.
//
// Thread-safety: pure functions over caller buffers (per-thread unpack buffers
// are thread_local).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace pier::kernels::internal {

enum class Isa { kScalar, kAvx2, kAvx512 };

const char* IsaName(Isa isa);
bool IsaSupported(Isa isa);
Isa BestIsa();

// MatMul forced onto one path (which must be supported), for tests and benchmarks.
Status MatMulWithIsa(Isa isa, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                     int64_t ldy, std::span<std::byte> scratch, ThreadPool& pool);

constexpr int64_t kBlock = 32;   // elements per activation / unpacked weight block
constexpr int kLanes = 8;        // canonical accumulator lanes
constexpr int64_t kRowTile = 4;  // rows unpacked together and reused across tokens

// Byte layout of one quantized activation row inside MatMul's scratch:
//   qs [n_cols] int8 | d [n_blocks] f32 | sx [n_blocks][8] f32
struct QuantLayout {
  int64_t n_cols = 0;
  int64_t n_blocks = 0;
  size_t d_offset = 0;
  size_t s_offset = 0;
  size_t row_stride = 0;  // multiple of 64
};
QuantLayout MakeQuantLayout(int64_t n_cols);

// Quantizes x [n_cols] into one row laid out as `layout` (row 64-byte aligned).
void QuantizeRowScalar(const float* x, const QuantLayout& layout, std::byte* row);

// Weight rows unpacked by UnpackRowScalar:
//   q [n_cols] u8 (s8 for Q8_0) | dw [n_blocks][8] f32 | mw [n_blocks][8] f32
struct UnpackLayout {
  size_t dw_offset = 0;
  size_t mw_offset = 0;
  size_t row_stride = 0;  // multiple of 64
};
UnpackLayout MakeUnpackLayout(const QuantLayout& layout);

bool IsQuantized(DType type);
// Whether q_w is signed (Q8_0) and whether the type has offset terms (all others).
bool HasSignedWeights(DType type);
bool HasOffsets(DType type);

void UnpackRowScalar(DType type, const uint8_t* src, const QuantLayout& layout,
                     const UnpackLayout& unpack, std::byte* dst);

// One MatMul over quantized weights, split into row ranges by the driver.
struct QuantJob {
  const WeightMatrix* w = nullptr;
  QuantLayout layout;
  UnpackLayout unpack;
  const std::byte* xq = nullptr;  // [n_tokens] rows of layout.row_stride bytes
  int64_t n_tokens = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// One MatMul over float weights (x used as f32 directly).
struct FloatJob {
  const WeightMatrix* w = nullptr;
  const float* x = nullptr;  // [n_tokens, n_cols]
  int64_t n_tokens = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Each path: quantize one activation row; compute rows [row_begin, row_end).
struct IsaKernels {
  void (*quantize_row)(const float* x, const QuantLayout& layout, std::byte* row);
  void (*quant_rows)(const QuantJob& job, int64_t row_begin, int64_t row_end);
  void (*float_rows)(const FloatJob& job, int64_t row_begin, int64_t row_end);
};

const IsaKernels& ScalarKernels();
const IsaKernels& Avx2Kernels();
const IsaKernels& Avx512Kernels();

// Canonical horizontal sum of 8 lanes.
inline float Hsum8(const float* v) {
  const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
  const float b0 = a0 + a2, b1 = a1 + a3;
  return b0 + b1;
}

}  // namespace pier::kernels::internal
