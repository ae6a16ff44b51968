// CUDA launchers of the quantized matrix product and the activation quantization that feeds
// it (host side; kernels in quant_matmul.cu, arithmetic in quant_dot.h).
//
//   y[t, r] = sum_k W[r, k] * x[t, k]
//
// W stays in its GGUF layout on the device (the quantized blocks, never widened to f32);
// x is quantized to 8-bit blocks first (LaunchQuantizeActivations), then every (row, token)
// is reduced in the canonical order of quant_dot.h, so the result is bitwise equal to the
// host golden and to the CPU's MatMul, and a token's row does not depend on the batch.
//
// Used by the CUDA plugin only. Launchers queue work on `stream` and return the launch
// status; they keep no state and may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pier::cuda {

// Quantizes x [n_tokens, n_cols] f32 (n_cols a multiple of 32, x 16-byte aligned) into
// n_tokens rows of quant::ActivationRowBytes(n_cols) bytes at xq (16-byte aligned).
// cudaErrorInvalidValue for bad shapes or alignment; cudaSuccess without launching for 0
// tokens.
cudaError_t LaunchQuantizeActivations(const float* x, int64_t n_tokens, int64_t n_cols, void* xq,
                                      cudaStream_t stream);

// y [n_tokens, ldy] (ldy >= n_rows) = W . xq for `type` (a ggml_type number that
// quant::IsQuantType accepts). weights: n_rows rows of quant::GgufRowBytes(type, n_cols)
// bytes, 4-byte aligned, n_cols a multiple of the type's GGUF block; xq as written by
// LaunchQuantizeActivations. cudaErrorInvalidValue for an unknown type, bad shapes or
// alignment.
cudaError_t LaunchQuantMatMul(int32_t type, const void* weights, int64_t n_rows, int64_t n_cols,
                              const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                              cudaStream_t stream);

// One of the matrices of LaunchQuantMatMulSlices: n_rows rows (weights as for
// LaunchQuantMatMul) and their results y [n_tokens, ldy].
struct MatrixSlice {
  const void* weights;
  int64_t n_rows;
  float* y;
  int64_t ldy;
};
constexpr int kMaxMatrixSlices = 4;

// LaunchQuantMatMul over up to kMaxMatrixSlices matrices of one type and width that multiply
// the same activations (Q, K and V; gate and up), in one launch: each row's result is bitwise
// the one LaunchQuantMatMul gives for its own matrix. cudaErrorInvalidValue as there, or for
// no matrices or too many; an empty slice (0 rows) is skipped, and 0 tokens is success, as
// there.
cudaError_t LaunchQuantMatMulSlices(int32_t type, const MatrixSlice* matrices, int count,
                                    int64_t n_cols, const void* xq, int64_t n_tokens,
                                    cudaStream_t stream);

// The same product over a matrix packed by quant::PackRows32 (quant_pack.h: Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0; `packed` 16-byte aligned): the same bits as LaunchQuantMatMul on the GGUF rows,
// with whole-block aligned loads. cudaErrorInvalidValue for another type or bad arguments.
cudaError_t LaunchPackedMatMul(int32_t type, const void* packed, int64_t n_rows, int64_t n_cols,
                               const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                               cudaStream_t stream);

// The same product on the tensor cores (int8 mma.sync, sm_80 and later): a warp takes 16
// rows by up to 64 tokens, the block sums exact in int32, then the canonical chain: the same
// bits as LaunchQuantMatMul, for many tokens at once (prefill, large decode batches). All the
// types but Q6_K (whose two half-block scales an int8 mma over 32 values cannot apply).
bool MmaMatMulTakes(int32_t type);
cudaError_t LaunchMmaMatMul(int32_t type, const void* weights, int64_t n_rows, int64_t n_cols,
                            const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                            cudaStream_t stream);

}  // namespace pier::cuda
