// GGUF Q4_1 -> f32 dequantization on the GPU (see dequantize.h).
//
// Memory-bound: each block reads 20 bytes and writes 128. One thread handles a quarter of a
// block: 4 bytes of qs, i.e. elements 4j..4j+3 (low nibbles) and 16+4j..16+4j+3 (high
// nibbles), written as two float4 stores. Consecutive threads cover consecutive bytes, so
// both loads and stores coalesce.
#include <cuda_fp16.h>

#include "kernels/cuda/dequantize.h"

namespace pier::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kThreadsPerQ4Block = 4;

__device__ __forceinline__ float Dequant(float d, float m, uint32_t q) {
  // Explicit rounding modes stop nvcc from contracting into an FMA.
  return __fadd_rn(__fmul_rn(d, static_cast<float>(q)), m);
}

__global__ void DequantizeQ4_1Kernel(const uint8_t* __restrict__ src, float* __restrict__ dst,
                                     uint64_t n_quarters) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n_quarters;
       t += stride) {
    const uint64_t block = t / kThreadsPerQ4Block;
    const uint32_t quarter = static_cast<uint32_t>(t % kThreadsPerQ4Block);
    const uint8_t* b = src + block * kQ4_1BlockBytes;
    // d and m are the first two halves; the block start is 4-byte aligned.
    const uint32_t dm = __ldg(reinterpret_cast<const uint32_t*>(b));
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(dm & 0xffffu)));
    const float m = __half2float(__ushort_as_half(static_cast<unsigned short>(dm >> 16)));
    const uint32_t qs = __ldg(reinterpret_cast<const uint32_t*>(b + 4) + quarter);

    float4 lo;
    lo.x = Dequant(d, m, qs & 0xfu);
    lo.y = Dequant(d, m, (qs >> 8) & 0xfu);
    lo.z = Dequant(d, m, (qs >> 16) & 0xfu);
    lo.w = Dequant(d, m, (qs >> 24) & 0xfu);
    float4 hi;
    hi.x = Dequant(d, m, (qs >> 4) & 0xfu);
    hi.y = Dequant(d, m, (qs >> 12) & 0xfu);
    hi.z = Dequant(d, m, (qs >> 20) & 0xfu);
    hi.w = Dequant(d, m, (qs >> 28) & 0xfu);

    float* out = dst + block * kQ4_1BlockElements + quarter * 4;
    reinterpret_cast<float4*>(out)[0] = lo;
    reinterpret_cast<float4*>(out + 16)[0] = hi;
  }
}

}  // namespace

cudaError_t LaunchDequantizeQ4_1(const void* src, float* dst, uint64_t n_blocks,
                                 cudaStream_t stream) {
  if (n_blocks == 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr || reinterpret_cast<uintptr_t>(src) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(dst) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const uint64_t n_quarters = n_blocks * kThreadsPerQ4Block;
  // Enough blocks to fill any current GPU several times over; the loop covers the rest.
  const uint64_t wanted = (n_quarters + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const unsigned int grid = static_cast<unsigned int>(wanted < 65536 ? wanted : 65536);
  DequantizeQ4_1Kernel<<<grid, kThreadsPerBlock, 0, stream>>>(static_cast<const uint8_t*>(src), dst,
                                                              n_quarters);
  return cudaGetLastError();
}

}  // namespace pier::cuda
