// The forward pass's per-token operations on the GPU (see row_kernels.h).
//
// AddRmsNorm: one 128-thread block per token. The residual add is element-wise; the sum of
// squares is the CPU's 8-lane chain, run by threads 0-7 (the order is the canonical form's,
// so it cannot be split further), then each warp normalizes and quantizes blocks of 32.
// SiluMul: one warp per block of 32. Rope, EmbeddingRows: one thread per pair or element.
// Argmax: one 256-thread block per token; (value, index) pairs reduce with "larger value,
// then lower index", which is the same pick in any order.
#include <climits>

#include "kernels/cuda/row_kernels.h"
#include "kernels/cuda/row_math.h"
#include "kernels/cuda/warp_quantize.cuh"

namespace pier::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kNormThreads = 128;

__global__ void __launch_bounds__(kNormThreads)
    AddRmsNormKernel(float* __restrict__ x, const float* __restrict__ add,
                     const float* __restrict__ weight, int64_t n, float eps, float* __restrict__ y,
                     uint8_t* __restrict__ xq) {
  __shared__ float lanes[8];
  const int64_t t = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  float* xt = x + t * n;
  if (add != nullptr) {
    for (int64_t i = tid; i < n; i += kNormThreads) xt[i] = xt[i] + add[t * n + i];
    __syncthreads();
  }
  if (tid < 8) lanes[tid] = rowmath::SumSquaresLane(xt, n, tid);
  __syncthreads();
  const float scale = rowmath::RmsScale(rowmath::Hsum8(lanes), n, eps);

  const int lane = tid & 31, warp = tid >> 5;
  const int64_t n_blocks = n / quant::kBlock;
  uint8_t* xq_row = xq != nullptr ? xq + t * quant::ActivationRowBytes(n) : nullptr;
  for (int64_t b = warp; b < n_blocks; b += kNormThreads / 32) {
    const int64_t i = quant::kBlock * b + lane;
    const float v = rowmath::RmsApply(xt[i], scale, weight[i]);
    if (y != nullptr) y[t * n + i] = v;
    if (xq_row != nullptr) WarpQuantizeBlock(v, lane, xq_row, n, b);
  }
}

constexpr int kWarpsPerBlock = 8;

__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    SiluMulKernel(const float* __restrict__ gate, const float* __restrict__ up, int64_t n_tokens,
                  int64_t n, float* __restrict__ h, uint8_t* __restrict__ xq) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t n_blocks = n / quant::kBlock;
  const int64_t global_block =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (global_block >= n_tokens * n_blocks) return;  // whole warps leave
  const int64_t t = global_block / n_blocks, b = global_block % n_blocks;
  const int64_t i = t * n + quant::kBlock * b + lane;
  const float v = rowmath::SiluMul(gate[i], up[i]);
  if (h != nullptr) h[i] = v;
  if (xq != nullptr) WarpQuantizeBlock(v, lane, xq + t * quant::ActivationRowBytes(n), n, b);
}

__global__ void RopeKernel(float* __restrict__ x, int64_t n_tokens, int64_t n_heads,
                           int64_t head_dim, int64_t n_rot, bool neox,
                           const float* __restrict__ cos_sin) {
  const int64_t half = n_rot / 2;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (pair >= n_tokens * n_heads * half) return;
  const int64_t i = pair % half;
  const int64_t head = (pair / half) % n_heads;
  const int64_t t = pair / (half * n_heads);
  float* v = x + (t * n_heads + head) * head_dim;
  const float* cs = cos_sin + (t * half + i) * 2;
  if (neox) {
    rowmath::RopePair(v + i, v + i + half, cs[0], cs[1]);
  } else {
    rowmath::RopePair(v + 2 * i, v + 2 * i + 1, cs[0], cs[1]);
  }
}

__global__ void EmbeddingRowsKernel(int32_t type, const uint8_t* __restrict__ table,
                                    int64_t row_bytes, int64_t n_vocab, int64_t n_cols,
                                    const int32_t* __restrict__ ids, int64_t n_tokens,
                                    float* __restrict__ out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n_tokens * n_cols) return;
  const int64_t t = e / n_cols, k = e % n_cols;
  const int32_t id = ids[t];
  if (id < 0 || id >= n_vocab) {
    out[e] = __int_as_float(0x7fc00000);  // NaN: the caller let a bad id through
    return;
  }
  const uint8_t* row = table + id * row_bytes;
  float v;
  if (type == 0) {
    v = reinterpret_cast<const float*>(row)[k];
  } else if (type == 1) {
    v = quant::HalfToFloat(quant::LoadU16(row + 2 * k));
  } else {
    v = rowmath::DequantizeElement(static_cast<quant::QuantType>(type), row, k);
  }
  out[e] = v;
}

constexpr int kArgmaxThreads = 256;

// The better of two candidates: the larger value, then the lower index.
__device__ __forceinline__ void Better(float& v, int32_t& i, float ov, int32_t oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__global__ void __launch_bounds__(kArgmaxThreads)
    ArgmaxKernel(const float* __restrict__ logits, int64_t n_vocab, int64_t ld,
                 int32_t* __restrict__ out) {
  __shared__ float best_v[kArgmaxThreads / 32];
  __shared__ int32_t best_i[kArgmaxThreads / 32];
  __shared__ int nan_seen;
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) nan_seen = 0;
  __syncthreads();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * ld;
  // A thread with no element keeps (-inf, INT_MAX): it loses every tie, so an all -inf row
  // still gives its lowest index.
  float v = -INFINITY;
  int32_t i = INT_MAX;
  bool nan = false;
  for (int64_t k = tid; k < n_vocab; k += kArgmaxThreads) {
    const float x = row[k];
    nan |= x != x;
    Better(v, i, x, static_cast<int32_t>(k));
  }
  if (nan) atomicOr(&nan_seen, 1);
  for (int offset = 16; offset > 0; offset >>= 1) {
    Better(v, i, __shfl_xor_sync(kFullMask, v, offset), __shfl_xor_sync(kFullMask, i, offset));
  }
  if ((tid & 31) == 0) {
    best_v[tid >> 5] = v;
    best_i[tid >> 5] = i;
  }
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) Better(v, i, best_v[w], best_i[w]);
    out[blockIdx.x] = nan_seen ? -1 : i;
  }
}

bool Aligned(const void* p, uintptr_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

unsigned GridFor(int64_t items, int threads) {
  return static_cast<unsigned>((items + threads - 1) / threads);
}

constexpr int64_t kMaxGrid = 0x7fffffff;

}  // namespace

cudaError_t LaunchAddRmsNorm(float* x, const float* add, const float* weight, int64_t n_tokens,
                             int64_t n, float eps, float* y, void* xq, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  if (n_tokens < 0 || n_tokens > kMaxGrid || n <= 0 || n % quant::kBlock != 0 || x == nullptr ||
      weight == nullptr || (xq != nullptr && !Aligned(xq, 16))) {
    return cudaErrorInvalidValue;
  }
  AddRmsNormKernel<<<static_cast<unsigned>(n_tokens), kNormThreads, 0, stream>>>(
      x, add, weight, n, eps, y, static_cast<uint8_t*>(xq));
  return cudaGetLastError();
}

cudaError_t LaunchSiluMul(const float* gate, const float* up, int64_t n_tokens, int64_t n, float* h,
                          void* xq, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  if (n_tokens < 0 || n <= 0 || n % quant::kBlock != 0 || gate == nullptr || up == nullptr ||
      (xq != nullptr && !Aligned(xq, 16)) ||
      n_tokens * (n / quant::kBlock) / kWarpsPerBlock >= kMaxGrid) {
    return cudaErrorInvalidValue;
  }
  SiluMulKernel<<<GridFor(n_tokens * (n / quant::kBlock), kWarpsPerBlock), 32 * kWarpsPerBlock, 0,
                  stream>>>(gate, up, n_tokens, n, h, static_cast<uint8_t*>(xq));
  return cudaGetLastError();
}

cudaError_t LaunchRope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                       bool neox, const float* cos_sin, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  if (n_tokens < 0 || n_heads <= 0 || head_dim <= 0 || n_rot <= 0 || n_rot % 2 != 0 ||
      n_rot > head_dim || x == nullptr || cos_sin == nullptr ||
      n_tokens * n_heads * (n_rot / 2) / 256 >= kMaxGrid) {
    return cudaErrorInvalidValue;
  }
  RopeKernel<<<GridFor(n_tokens * n_heads * (n_rot / 2), 256), 256, 0, stream>>>(
      x, n_tokens, n_heads, head_dim, n_rot, neox, cos_sin);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingRows(int32_t type, const void* table, int64_t n_vocab, int64_t n_cols,
                                const int32_t* ids, int64_t n_tokens, float* out,
                                cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  const bool plain = type == 0 || type == 1;
  if (!plain && !quant::IsQuantType(type)) return cudaErrorInvalidValue;
  const int64_t block = plain ? 1 : quant::GgufBlockElements(static_cast<quant::QuantType>(type));
  if (n_tokens < 0 || n_vocab <= 0 || n_cols <= 0 || n_cols % block != 0 || table == nullptr ||
      ids == nullptr || out == nullptr || (type == 0 && !Aligned(table, 4)) ||
      n_tokens * n_cols / 256 >= kMaxGrid) {
    return cudaErrorInvalidValue;
  }
  const int64_t row_bytes = type == 0 ? 4 * n_cols
                            : type == 1
                                ? 2 * n_cols
                                : quant::GgufRowBytes(static_cast<quant::QuantType>(type), n_cols);
  EmbeddingRowsKernel<<<GridFor(n_tokens * n_cols, 256), 256, 0, stream>>>(
      type, static_cast<const uint8_t*>(table), row_bytes, n_vocab, n_cols, ids, n_tokens, out);
  return cudaGetLastError();
}

cudaError_t LaunchArgmax(const float* logits, int64_t n_tokens, int64_t n_vocab, int64_t ld,
                         int32_t* out, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  if (n_tokens < 0 || n_tokens > kMaxGrid || n_vocab <= 0 || n_vocab > INT_MAX || ld < n_vocab ||
      logits == nullptr || out == nullptr) {
    return cudaErrorInvalidValue;
  }
  ArgmaxKernel<<<static_cast<unsigned>(n_tokens), kArgmaxThreads, 0, stream>>>(logits, n_vocab, ld,
                                                                               out);
  return cudaGetLastError();
}

}  // namespace pier::cuda
