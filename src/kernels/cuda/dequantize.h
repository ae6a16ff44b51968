// CUDA kernels that turn GGUF quantized blocks into f32 (host-side launchers).
//
// Used by the CUDA plugin (src/device/cuda/); nothing outside the plugin includes this,
// since `pier` itself links no CUDA. Launchers only queue work on `stream` and return the
// launch status; they hold no state and may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pier::cuda {

// Bytes of one GGUF Q4_1 block: {half d; half m; uint8_t qs[16]} for 32 elements.
inline constexpr int64_t kQ4_1BlockBytes = 20;
inline constexpr int64_t kQ4_1BlockElements = 32;

// Dequantizes `n_blocks` Q4_1 blocks to f32: x[i] = d * q[i] + m, rounded after the multiply
// and after the add (no fused multiply-add), so it matches a plain scalar loop bit for bit.
// q[i] is the low nibble of qs[i] for i < 16 and the high nibble of qs[i - 16] otherwise.
//   src: [n_blocks] blocks, 4-byte aligned
//   dst: [n_blocks * 32] f32, 16-byte aligned
// Returns cudaErrorInvalidValue for misaligned pointers; cudaSuccess without launching when
// n_blocks is 0.
cudaError_t LaunchDequantizeQ4_1(const void* src, float* dst, uint64_t n_blocks,
                                 cudaStream_t stream);

}  // namespace pier::cuda
