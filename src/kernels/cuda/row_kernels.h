// CUDA launchers of the forward pass's per-token operations (host side; kernels in
// row_kernels.cu, arithmetic in row_math.h). Each gives the CPU runner's bits for the same
// inputs (see row_math.h) and treats every token alone, so no result depends on the batch.
//
// Shapes are row-major [n_tokens, n] with rows n floats apart unless said otherwise. Used by
// the CUDA plugin only. Launchers queue work on `stream` and return the launch status
// (cudaErrorInvalidValue for bad shapes or pointers; cudaSuccess without launching for 0
// tokens); they keep no state and may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pier::cuda {

// The block input of a layer: x += add (when add is not null: the residual), then
// y = RmsNorm(x) * weight, written as f32 to y and/or as 8-bit activation blocks to xq
// (quant_matmul.h's form, for the next matrix product); y and xq may each be null.
// n a positive multiple of 32; xq 16-byte aligned.
cudaError_t LaunchAddRmsNorm(float* x, const float* add, const float* weight, int64_t n_tokens,
                             int64_t n, float eps, float* y, void* xq, cudaStream_t stream);

// h = silu(gate) * up, written as f32 to h and/or as 8-bit activation blocks to xq (for the
// down projection). gate, up: [n_tokens, n]; n a positive multiple of 32.
cudaError_t LaunchSiluMul(const float* gate, const float* up, int64_t n_tokens, int64_t n, float* h,
                          void* xq, cudaStream_t stream);

// Rotates the first n_rot dimensions of every head in place. x: [n_tokens, n_heads,
// head_dim]; cos_sin: [n_tokens, n_rot / 2, 2] (cos, sin) of each token's angles, made on the
// host as the CPU runner makes them. neox: pairs (i, i + n_rot/2) instead of (2i, 2i + 1).
cudaError_t LaunchRope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                       bool neox, const float* cos_sin, cudaStream_t stream);

// out[t, :] = row ids[t] of an embedding table of `type` (F32 = 0, F16 = 1, or a type of
// quant_dot.h) in GGUF layout, n_vocab rows of n_cols, as f32. An id outside [0, n_vocab)
// gives a row of NaN (callers check ids first; the kernel never reads out of bounds).
cudaError_t LaunchEmbeddingRows(int32_t type, const void* table, int64_t n_vocab, int64_t n_cols,
                                const int32_t* ids, int64_t n_tokens, float* out,
                                cudaStream_t stream);

// out[t] = the lowest index among the largest of logits[t, 0 .. n_vocab) (rows ld floats
// apart), as the CPU's greedy sampler picks; -1 for a row holding a NaN.
cudaError_t LaunchArgmax(const float* logits, int64_t n_tokens, int64_t n_vocab, int64_t ld,
                         int32_t* out, cudaStream_t stream);

}  // namespace pier::cuda
