// The quantized product on the tensor cores (see quant_matmul.h's LaunchMmaMatMul).
//
// A warp computes 16 weight rows against up to 64 tokens, block of 32 by block in order. Per
// block, one int8 mma.sync.m16n8k32 per 8 tokens gives the exact integer sums of 16 rows by 8
// tokens (k = 32 is one whole block, accumulated in int32: exact), and each lane folds its
// four (row, token) sums into their accumulators with quant_dot.h's CombineBlock: the same
// canonical chain as the other products, so the same bits. The weights of a block are decoded
// once per warp (LoadWeightQuad gives each lane's fragment words directly) and reused for
// every token tile.
//
// Fragments of mma.m16n8k32 .s8 (PTX ISA), g = lane / 4, t = lane % 4:
//   A (16 x 32, row-major): a0 = row g, bytes 4t..4t+3; a1 = row g+8, the same bytes;
//                           a2, a3 = the same rows, bytes 16+4t..16+4t+3
//   B (32 x 8, column-major): b0 = token g, bytes 4t..4t+3; b1 = bytes 16+4t..16+4t+3
//   C (16 x 8): c0, c1 = row g, tokens 2t, 2t+1; c2, c3 = row g+8, tokens 2t, 2t+1
#include "kernels/cuda/quant_dispatch.cuh"
#include "kernels/cuda/quant_dot.h"
#include "kernels/cuda/quant_matmul.h"

namespace pier::cuda {
namespace {

using quant::BlockFactors;
using quant::QuantType;
using quant::WeightQuad;

constexpr int kWarpsPerCta = 4;
constexpr int kRowsPerWarp = 16;
constexpr int kTileTokens = 8;
constexpr int kTiles = 8;  // token tiles per warp: 64 tokens

__device__ __forceinline__ void MmaS8(const uint32_t a[4], const uint32_t b[2], int32_t c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__)
  __trap();  // built for a GPU without int8 mma: never silently zero (the launcher refuses)
#endif
}

template <QuantType kType>
__global__ void __launch_bounds__(32 * kWarpsPerCta)
    MmaMatMulKernel(const uint8_t* __restrict__ weights, int64_t n_rows, int64_t n_cols,
                    const uint8_t* __restrict__ xq, int64_t n_tokens, float* __restrict__ y,
                    int64_t ldy) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 =
      (static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5)) * kRowsPerWarp;
  if (row0 >= n_rows) return;  // the whole warp leaves together
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * kTileTokens * kTiles;
  const int64_t n_blocks = n_cols / quant::kBlock;
  const int64_t x_bytes = quant::ActivationRowBytes(n_cols);
  const int64_t row_bytes = quant::GgufRowBytes(kType, n_cols);
  const int64_t rows[2] = {row0 + g, row0 + g + 8};
  const bool row_ok[2] = {rows[0] < n_rows, rows[1] < n_rows};

  float acc[kTiles][4];
#pragma unroll
  for (int k = 0; k < kTiles; ++k) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0f;

  for (int64_t b = 0; b < n_blocks; ++b) {
    uint32_t a[4] = {0, 0, 0, 0};
    BlockFactors f[2] = {{0.0f, 0.0f, quant::HasOffset(kType)},
                         {0.0f, 0.0f, quant::HasOffset(kType)}};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!row_ok[h]) continue;
      const uint8_t* row = weights + rows[h] * row_bytes;
      a[h] = quant::LoadWeightQuad(kType, row, b, t).packed;          // bytes 4t..
      a[h + 2] = quant::LoadWeightQuad(kType, row, b, 4 + t).packed;  // bytes 16+4t..
      f[h] = quant::LoadBlockFactors(kType, row, b);
    }
#pragma unroll
    for (int k = 0; k < kTiles; ++k) {
      const int64_t tile0 = tok0 + k * kTileTokens;
      if (tile0 >= n_tokens) break;       // uniform across the warp
      const int64_t token_b = tile0 + g;  // this lane's B column
      uint32_t bfrag[2] = {0, 0};
      if (token_b < n_tokens) {
        const uint8_t* x = xq + token_b * x_bytes + quant::kBlock * b;
        bfrag[0] = *reinterpret_cast<const uint32_t*>(x + 4 * t);
        bfrag[1] = *reinterpret_cast<const uint32_t*>(x + 16 + 4 * t);
      }
      int32_t c[4] = {0, 0, 0, 0};
      MmaS8(a, bfrag, c);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t token = tile0 + 2 * t + (i & 1);
        if (token >= n_tokens || !row_ok[i >> 1]) continue;
        const auto* dx = reinterpret_cast<const float*>(xq + token * x_bytes + n_cols);
        acc[k][i] = quant::CombineBlock(acc[k][i], c[i], f[i >> 1], dx[b], dx[n_blocks + b]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kTiles; ++k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t token = tok0 + k * kTileTokens + 2 * t + (i & 1);
      const int64_t row = rows[i >> 1];
      if (token < n_tokens && row < n_rows) y[token * ldy + row] = acc[k][i];
    }
  }
}

template <QuantType kType>
cudaError_t Launch(const void* weights, int64_t n_rows, int64_t n_cols, const void* xq,
                   int64_t n_tokens, float* y, int64_t ldy, cudaStream_t stream) {
  const int64_t rows_per_cta = kWarpsPerCta * kRowsPerWarp;
  const int64_t tokens_per_cta = kTileTokens * kTiles;
  const dim3 grid(static_cast<unsigned>((n_rows + rows_per_cta - 1) / rows_per_cta),
                  static_cast<unsigned>((n_tokens + tokens_per_cta - 1) / tokens_per_cta));
  MmaMatMulKernel<kType>
      <<<grid, 32 * kWarpsPerCta, 0, stream>>>(static_cast<const uint8_t*>(weights), n_rows, n_cols,
                                               static_cast<const uint8_t*>(xq), n_tokens, y, ldy);
  return cudaGetLastError();
}

}  // namespace

bool MmaMatMulTakes(int32_t type) {
  return quant::IsQuantType(type) && static_cast<QuantType>(type) != QuantType::kQ6_K;
}

cudaError_t LaunchMmaMatMul(int32_t type, const void* weights, int64_t n_rows, int64_t n_cols,
                            const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                            cudaStream_t stream) {
  if (n_tokens == 0 || n_rows == 0) return cudaSuccess;
  if (!MmaMatMulTakes(type) || n_rows < 0 || n_tokens < 0 || n_cols <= 0 ||
      n_cols % quant::GgufBlockElements(static_cast<QuantType>(type)) != 0 || ldy < n_rows ||
      weights == nullptr || xq == nullptr || y == nullptr ||
      reinterpret_cast<uintptr_t>(xq) % 16 != 0 || reinterpret_cast<uintptr_t>(y) % 4 != 0 ||
      (n_tokens + 63) / 64 > 65535 || (n_rows + 63) / 64 > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  // int8 mma.sync needs compute capability 8.0 or later.
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      major < 8) {
    return cudaErrorInvalidValue;
  }
  return DispatchQuantType(type, [&](auto tag) -> cudaError_t {
    constexpr QuantType kType = decltype(tag)::value;
    if constexpr (kType == QuantType::kQ6_K) {
      return cudaErrorInvalidValue;  // refused above: no int8 mma for its half-block scales
    } else {
      return Launch<kType>(weights, n_rows, n_cols, xq, n_tokens, y, ldy, stream);
    }
  });
}

}  // namespace pier::cuda
