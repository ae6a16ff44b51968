// Device helper shared by the kernels that end in 8-bit activation blocks (quant_matmul.cu's
// quantization, row_kernels.cu's fused norm and SwiGLU): one warp quantizes one block of 32
// values, one value per lane, with quant_dot.h's steps (and zeroes the row's padding with the
// last block). amax and the sum of q are warp
// reductions, exact in any order (a max, and integer sums), so the block equals
// quant::QuantizeBlock's bit for bit.
#pragma once

#include "kernels/cuda/quant_dot.h"

namespace pier::cuda {

// Writes block `b` of the activation row at `row` (quant::ActivationRowBytes(n_cols) bytes):
// q for this lane's value v, and dx, bx from lane 0. Every lane of the warp must call it.
__device__ __forceinline__ void WarpQuantizeBlock(float v, int lane, uint8_t* row, int64_t n_cols,
                                                  int64_t b) {
  constexpr unsigned kFull = 0xffffffffu;
  float amax = fabsf(v);
  for (int offset = 16; offset > 0; offset >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, offset));
  }
  const float dx = quant::ActivationScale(amax);
  const int32_t q = quant::QuantizeValue(v, quant::ActivationInverseScale(dx));
  int32_t qsum = q;
  for (int offset = 16; offset > 0; offset >>= 1) qsum += __shfl_xor_sync(kFull, qsum, offset);
  reinterpret_cast<int8_t*>(row)[quant::kBlock * b + lane] = static_cast<int8_t>(q);
  if (lane == 0) {
    const int64_t n_blocks = n_cols / quant::kBlock;
    auto* factors = reinterpret_cast<float*>(row + n_cols);
    factors[b] = dx;
    factors[n_blocks + b] = quant::ActivationOffsetSum(qsum, dx);
    if (b == n_blocks - 1) quant::ZeroActivationPadding(row, n_cols);
  }
}

}  // namespace pier::cuda
