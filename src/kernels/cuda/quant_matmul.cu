// The quantized matrix product and activation quantization on the GPU (see quant_matmul.h).
//
// Product: one warp per weight row and tile of up to 8 tokens (the rows of up to four matrices
// sharing the activations, one after the other, in one launch: Q, K and V; gate and up). The warp
// walks the row's blocks of 32 sixteen at a time, loading all sixteen blocks' weights first (four
// rounds of four, so that enough bytes are in flight), then per round: lane 8 * j + quad holds the
// 4 weights `quad` of block first + j and takes their exact integer dot product with each token's 4
// activation bytes (dp4a); three integer shuffles give each 8-lane group its block's sum. Then
// every lane folds the four blocks into its token accumulators in block order (quant_dot.h's
// CombineBlock), so all lanes hold the same canonical value and lane 0 writes it. Nothing depends
// on the tile, the grid or the batch: each (row, token) takes the same operations.
//
// Activation quantization: one warp per block of 32 values (warp_quantize.cuh).
#include "kernels/cuda/quant_dispatch.cuh"
#include "kernels/cuda/quant_dot.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/cuda/warp_quantize.cuh"

namespace pier::cuda {
namespace {

using quant::BlockFactors;
using quant::QuantType;
using quant::WeightQuad;

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerCta = 4;
constexpr int kTokenTile = 8;
constexpr int kBlocksPerRound = 4;  // blocks of 32 a warp decodes at once: 8 lanes each
// Rounds whose weights a warp loads before using any: more bytes in flight per warp, which a
// memory-bound product at few tokens needs (one round alone leaves HBM mostly idle).
constexpr int kRounds = 4;
constexpr int kBlocksPerStep = kBlocksPerRound * kRounds;

// The matrices of one launch: slice s holds rows end[s - 1] .. end[s] - 1 of the launch (end[-1]
// = 0), its weights at w[s] and its results at y[s] (rows ldy[s] apart).
struct Slices {
  const uint8_t* w[kMaxMatrixSlices];
  float* y[kMaxMatrixSlices];
  int64_t ldy[kMaxMatrixSlices];
  int64_t end[kMaxMatrixSlices];
  int count;
  int64_t rows;  // end[count - 1]: every row of the launch
};

template <QuantType kType>
__global__ void __launch_bounds__(32 * kWarpsPerCta)
    QuantMatMulKernel(const Slices slices, int64_t n_cols, const uint8_t* __restrict__ xq,
                      int64_t n_tokens) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5);
  if (r >= slices.rows) return;  // the whole warp leaves together
  // The row's matrix (the same for the whole warp); where its results go is looked up again
  // at the end, so that it takes no registers during the loop.
  const uint8_t* weights = slices.w[0];
  int64_t first_row = 0;
#pragma unroll
  for (int s = 1; s < kMaxMatrixSlices; ++s) {
    if (s < slices.count && r >= slices.end[s - 1]) {
      weights = slices.w[s];
      first_row = slices.end[s - 1];
    }
  }
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokenTile;
  const int n_tile = static_cast<int>(n_tokens - t0 < kTokenTile ? n_tokens - t0 : kTokenTile);
  const int j = lane >> 3;
  const int quad = lane & 7;
  const int64_t n_blocks = n_cols / quant::kBlock;
  const int64_t x_bytes = quant::ActivationRowBytes(n_cols);
  const uint8_t* row = weights + (r - first_row) * quant::GgufRowBytes(kType, n_cols);

  float acc[kTokenTile];
#pragma unroll
  for (int t = 0; t < kTokenTile; ++t) acc[t] = 0.0f;

  for (int64_t b0 = 0; b0 < n_blocks; b0 += kBlocksPerStep) {
    // Every round's weights and this lane's block factors first.
    WeightQuad w[kRounds];
    BlockFactors f[kRounds];
#pragma unroll
    for (int round = 0; round < kRounds; ++round) {
      const int64_t b = b0 + kBlocksPerRound * round + j;
      const bool valid = b < n_blocks;
      w[round] = valid ? quant::LoadWeightQuad(kType, row, b, quad) : WeightQuad{0, 0};
      f[round] = BlockFactors{0.0f, 0.0f, quant::HasOffset(kType)};
      if (valid && quad == 0) f[round] = quant::LoadBlockFactors(kType, row, b);
    }
#pragma unroll
    for (int round = 0; round < kRounds; ++round) {
      const int64_t first = b0 + kBlocksPerRound * round;  // this round's first block
      if (first >= n_blocks) break;                        // uniform across the warp
      const int64_t b = first + j;
      const bool valid = b < n_blocks;
      const int steps =
          static_cast<int>(n_blocks - first < kBlocksPerRound ? n_blocks - first : kBlocksPerRound);
      // Every lane gets the round's four blocks' factors once for all tokens.
      BlockFactors factors[kBlocksPerRound];
#pragma unroll
      for (int jj = 0; jj < kBlocksPerRound; ++jj) {
        factors[jj] =
            BlockFactors{__shfl_sync(kFullMask, f[round].dw, 8 * jj),
                         __shfl_sync(kFullMask, f[round].mw, 8 * jj), f[round].has_offset};
      }
#pragma unroll
      for (int t = 0; t < kTokenTile; ++t) {
        if (t < n_tile) {  // uniform across the warp
          const uint8_t* x = xq + (t0 + t) * x_bytes;
          const uint32_t x4 =
              valid ? *reinterpret_cast<const uint32_t*>(x + quant::kBlock * b + 4 * quad) : 0u;
          int32_t p = quant::QuadDot(w[round], x4);
          p += __shfl_xor_sync(kFullMask, p, 1);
          p += __shfl_xor_sync(kFullMask, p, 2);
          p += __shfl_xor_sync(kFullMask, p, 4);
          const auto* dx = reinterpret_cast<const float*>(x + n_cols);
          const float* bx = dx + n_blocks;
#pragma unroll
          for (int jj = 0; jj < kBlocksPerRound; ++jj) {
            const int32_t isum = __shfl_sync(kFullMask, p, 8 * jj);
            if (jj < steps) {
              acc[t] =
                  quant::CombineBlock(acc[t], isum, factors[jj], dx[first + jj], bx[first + jj]);
            }
          }
        }
      }
    }
  }
  if (lane == 0) {
    float* y = slices.y[0];
    int64_t ldy = slices.ldy[0], local = r;
#pragma unroll
    for (int s = 1; s < kMaxMatrixSlices; ++s) {
      if (s < slices.count && r >= slices.end[s - 1]) {
        y = slices.y[s];
        ldy = slices.ldy[s];
        local = r - slices.end[s - 1];
      }
    }
#pragma unroll
    for (int t = 0; t < kTokenTile; ++t) {
      if (t < n_tile) y[(t0 + t) * ldy + local] = acc[t];
    }
  }
}

constexpr int kQuantizeWarps = 8;

__global__ void __launch_bounds__(32 * kQuantizeWarps)
    QuantizeActivationsKernel(const float* __restrict__ x, int64_t n_tokens, int64_t n_cols,
                              uint8_t* __restrict__ xq) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t n_blocks = n_cols / quant::kBlock;
  const int64_t global_block =
      static_cast<int64_t>(blockIdx.x) * kQuantizeWarps + (threadIdx.x >> 5);
  if (global_block >= n_tokens * n_blocks) return;
  const int64_t t = global_block / n_blocks;
  const int64_t b = global_block % n_blocks;
  const float v = x[t * n_cols + quant::kBlock * b + lane];
  WarpQuantizeBlock(v, lane, xq + t * quant::ActivationRowBytes(n_cols), n_cols, b);
}

template <QuantType kType>
cudaError_t Launch(const Slices& slices, int64_t n_cols, const void* xq, int64_t n_tokens,
                   cudaStream_t stream) {
  const int64_t n_rows = slices.rows;
  const dim3 grid(static_cast<unsigned>((n_rows + kWarpsPerCta - 1) / kWarpsPerCta),
                  static_cast<unsigned>((n_tokens + kTokenTile - 1) / kTokenTile));
  QuantMatMulKernel<kType><<<grid, 32 * kWarpsPerCta, 0, stream>>>(
      slices, n_cols, static_cast<const uint8_t*>(xq), n_tokens);
  return cudaGetLastError();
}

bool Aligned(const void* p, uintptr_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// The checks every launch of the product takes, for one matrix.
bool MatrixOk(int32_t type, const void* weights, int64_t n_rows, int64_t n_cols, const float* y,
              int64_t ldy) {
  return n_rows >= 0 && n_cols > 0 &&
         n_cols % quant::GgufBlockElements(static_cast<QuantType>(type)) == 0 && ldy >= n_rows &&
         weights != nullptr && y != nullptr && Aligned(y, 4);
}

cudaError_t LaunchSlices(int32_t type, const Slices& slices, int64_t n_cols, const void* xq,
                         int64_t n_tokens, cudaStream_t stream) {
  const int64_t n_rows = slices.rows;
  if (n_tokens == 0 || n_rows == 0) return cudaSuccess;
  if (n_tokens < 0 || xq == nullptr || !Aligned(xq, 16) ||
      (n_rows + kWarpsPerCta - 1) / kWarpsPerCta > 0x7fffffff ||
      (n_tokens + kTokenTile - 1) / kTokenTile > 65535) {
    return cudaErrorInvalidValue;
  }
  return DispatchQuantType(type, [&](auto tag) -> cudaError_t {
    constexpr QuantType kType = decltype(tag)::value;
    return Launch<kType>(slices, n_cols, xq, n_tokens, stream);
  });
}

}  // namespace

cudaError_t LaunchQuantizeActivations(const float* x, int64_t n_tokens, int64_t n_cols, void* xq,
                                      cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  if (n_tokens < 0 || n_cols <= 0 || n_cols % quant::kBlock != 0 || x == nullptr || xq == nullptr ||
      !Aligned(x, 16) || !Aligned(xq, 16)) {
    return cudaErrorInvalidValue;
  }
  const int64_t warps = n_tokens * (n_cols / quant::kBlock);
  const int64_t grid = (warps + kQuantizeWarps - 1) / kQuantizeWarps;
  if (grid > 0x7fffffff) return cudaErrorInvalidValue;
  QuantizeActivationsKernel<<<static_cast<unsigned>(grid), 32 * kQuantizeWarps, 0, stream>>>(
      x, n_tokens, n_cols, static_cast<uint8_t*>(xq));
  return cudaGetLastError();
}

cudaError_t LaunchQuantMatMul(int32_t type, const void* weights, int64_t n_rows, int64_t n_cols,
                              const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                              cudaStream_t stream) {
  if (n_tokens == 0 || n_rows == 0) return cudaSuccess;
  if (!quant::IsQuantType(type) || !MatrixOk(type, weights, n_rows, n_cols, y, ldy)) {
    return cudaErrorInvalidValue;
  }
  Slices slices{};
  slices.w[0] = static_cast<const uint8_t*>(weights);
  slices.y[0] = y;
  slices.ldy[0] = ldy;
  slices.end[0] = n_rows;
  slices.count = 1;
  slices.rows = n_rows;
  return LaunchSlices(type, slices, n_cols, xq, n_tokens, stream);
}

cudaError_t LaunchQuantMatMulSlices(int32_t type, const MatrixSlice* matrices, int count,
                                    int64_t n_cols, const void* xq, int64_t n_tokens,
                                    cudaStream_t stream) {
  if (!quant::IsQuantType(type) || matrices == nullptr || count < 1 || count > kMaxMatrixSlices) {
    return cudaErrorInvalidValue;
  }
  if (n_tokens == 0) return cudaSuccess;  // as LaunchQuantMatMul: nothing to check or do
  Slices slices{};
  int64_t rows = 0;
  for (int s = 0; s < count; ++s) {
    const MatrixSlice& m = matrices[s];
    // An empty slice is skipped (its pointers unused), as an empty matrix alone is.
    if (m.n_rows < 0 ||
        (m.n_rows != 0 && !MatrixOk(type, m.weights, m.n_rows, n_cols, m.y, m.ldy))) {
      return cudaErrorInvalidValue;
    }
    rows += m.n_rows;
    slices.w[s] = static_cast<const uint8_t*>(m.weights);
    slices.y[s] = m.y;
    slices.ldy[s] = m.ldy;
    slices.end[s] = rows;
  }
  slices.count = count;
  slices.rows = rows;
  return LaunchSlices(type, slices, n_cols, xq, n_tokens, stream);
}

}  // namespace pier::cuda
