// The quantized product over the packed layout of quant_pack.h (see quant_matmul.h's
// LaunchPackedMatMul).
//
// One warp per weight row and tile of up to 8 tokens; lane l holds block b0 + l of the row:
// one or two aligned 16-byte loads of its quants, its factors, then 8 dp4a per token against
// the token's 32 activation bytes (two 16-byte loads) give the block's exact integer sum. The
// warp then folds its 32 blocks into each token's accumulator in block order, every lane
// taking the sums and factors from their lanes with shuffles, so all lanes hold the canonical
// value (quant_dot.h) and lane 0 writes it. Per block and token that is one shuffle and two
// float operations, against a whole block's weights per lane and load.
#include "kernels/cuda/quant_dispatch.cuh"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/cuda/quant_pack.h"

namespace pier::cuda {
namespace {

using quant::BlockFactors;
using quant::QuantType;

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerCta = 4;
constexpr int kTokenTile = 8;

template <QuantType kType>
__global__ void __launch_bounds__(32 * kWarpsPerCta)
    PackedMatMulKernel(const uint8_t* __restrict__ packed, int64_t n_rows, int64_t n_cols,
                       const uint8_t* __restrict__ xq, int64_t n_tokens, float* __restrict__ y,
                       int64_t ldy) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5);
  if (r >= n_rows) return;  // the whole warp leaves together
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokenTile;
  const int n_tile = static_cast<int>(n_tokens - t0 < kTokenTile ? n_tokens - t0 : kTokenTile);
  const quant::PackedView v = quant::ViewPacked(kType, packed, n_rows, n_cols);
  const int64_t x_bytes = quant::ActivationRowBytes(n_cols);

  float acc[kTokenTile];
#pragma unroll
  for (int t = 0; t < kTokenTile; ++t) acc[t] = 0.0f;

  for (int64_t b0 = 0; b0 < v.n_blocks; b0 += 32) {
    const int64_t b = b0 + lane;
    const bool valid = b < v.n_blocks;
    uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    BlockFactors f{0.0f, 0.0f, quant::HasOffset(kType)};
    if (valid) {
      quant::LoadPackedBlock(kType, v, r, b, w);
      f = quant::LoadPackedFactors(kType, v, r, b);
    }
    const int steps = static_cast<int>(v.n_blocks - b0 < 32 ? v.n_blocks - b0 : 32);
    // This lane's block's integer sum for every token of the tile.
    int32_t isum[kTokenTile];
#pragma unroll
    for (int t = 0; t < kTokenTile; ++t) {
      isum[t] = 0;
      if (t < n_tile && valid) {
        const uint8_t* x = xq + (t0 + t) * x_bytes + quant::kBlock * b;
        const uint4 x0 = *reinterpret_cast<const uint4*>(x);
        const uint4 x1 = *reinterpret_cast<const uint4*>(x + 16);
        const uint32_t xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        isum[t] = quant::BlockDot(w, xs);
      }
    }
    // The canonical chain over the warp's blocks, in order.
    for (int j = 0; j < steps; ++j) {  // uniform across the warp
      const BlockFactors fj{__shfl_sync(kFullMask, f.dw, j), __shfl_sync(kFullMask, f.mw, j),
                            f.has_offset};
#pragma unroll
      for (int t = 0; t < kTokenTile; ++t) {
        const int32_t s = __shfl_sync(kFullMask, isum[t], j);
        if (t < n_tile) {
          const auto* dx = reinterpret_cast<const float*>(xq + (t0 + t) * x_bytes + n_cols);
          acc[t] = quant::CombineBlock(acc[t], s, fj, dx[b0 + j], dx[v.n_blocks + b0 + j]);
        }
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < kTokenTile; ++t) {
      if (t < n_tile) y[(t0 + t) * ldy + r] = acc[t];
    }
  }
}

template <QuantType kType>
cudaError_t Launch(const void* packed, int64_t n_rows, int64_t n_cols, const void* xq,
                   int64_t n_tokens, float* y, int64_t ldy, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((n_rows + kWarpsPerCta - 1) / kWarpsPerCta),
                  static_cast<unsigned>((n_tokens + kTokenTile - 1) / kTokenTile));
  PackedMatMulKernel<kType>
      <<<grid, 32 * kWarpsPerCta, 0, stream>>>(static_cast<const uint8_t*>(packed), n_rows, n_cols,
                                               static_cast<const uint8_t*>(xq), n_tokens, y, ldy);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPackedMatMul(int32_t type, const void* packed, int64_t n_rows, int64_t n_cols,
                               const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                               cudaStream_t stream) {
  if (n_tokens == 0 || n_rows == 0) return cudaSuccess;
  if (!quant::IsQuantType(type) || !quant::HasPackedLayout32(static_cast<QuantType>(type)) ||
      n_rows < 0 || n_tokens < 0 || n_cols <= 0 || n_cols % quant::kBlock != 0 || ldy < n_rows ||
      packed == nullptr || xq == nullptr || y == nullptr ||
      reinterpret_cast<uintptr_t>(packed) % 16 != 0 || reinterpret_cast<uintptr_t>(xq) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(y) % 4 != 0 ||
      (n_rows + kWarpsPerCta - 1) / kWarpsPerCta > 0x7fffffff ||
      (n_tokens + kTokenTile - 1) / kTokenTile > 65535) {
    return cudaErrorInvalidValue;
  }
  return DispatchQuantType(type, [&](auto tag) -> cudaError_t {
    constexpr QuantType kType = decltype(tag)::value;
    if constexpr (kType == QuantType::kQ4_K || kType == QuantType::kQ5_K ||
                  kType == QuantType::kQ6_K) {
      return cudaErrorInvalidValue;  // refused above: no packed layout for the k-quants
    } else {
      return Launch<kType>(packed, n_rows, n_cols, xq, n_tokens, y, ldy, stream);
    }
  });
}

}  // namespace pier::cuda
