// Quantized matrix products on the CPU, batch-invariant by construction.
//
// Y[t, r] = sum_k W[r, k] * X[t, k] for a weight matrix W stored in its GGUF
// layout (quantized blocks are read directly; no whole-tensor dequantization)
// and f32 activations X. The result for token t depends only on X[t, :] and W:
// every dot product is reduced in one fixed order, by one thread, with the same
// code whatever the batch size, so a token's output is bitwise identical alone
// or in a batch of 64. Threads split the output rows r, never the reduction.
// SIMD paths are chosen at run time (AVX2+FMA, AVX-512 where present, scalar
// fallback) and every path is checked against the scalar reference.
//
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K weights are best packed once at load (PackWeights in
// packed_weights.h): their kernel then computes 16 rows per vector, reusing each
// unpacked weight block for up to 16 tokens. A GGUF-layout matrix of those types
// is packed on the fly, 16 rows at a time, and gives the same bits.
//
// Thread-safety: MatMul may run concurrently on different outputs; it uses only
// the caller's scratch buffer and pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"
#include "tensor/dtype.h"

namespace pier {
class ThreadPool;
}

namespace pier::kernels {

// How a weight matrix's bytes are arranged.
enum class WeightLayout {
  kGguf,      // as in the file: row r starts at data + r * row_bytes
  kPacked16,  // rows interleaved in groups of 16 by PackWeights (packed_weights.h)
};

// A weight matrix [n_rows, n_cols]. row_bytes is the size of one row in GGUF layout (for
// kPacked16 too, where it only serves validation).
struct WeightMatrix {
  DType type;
  int64_t n_rows;
  int64_t n_cols;
  const uint8_t* data;
  size_t row_bytes;
  WeightLayout layout = WeightLayout::kGguf;
};

// Bytes of scratch MatMul needs for `n_tokens` rows of activations (e.g. X
// quantized to 8-bit blocks). Callers allocate it through the memory governor.
size_t MatMulScratchBytes(const WeightMatrix& w, int64_t n_tokens);

// x: [n_tokens, w.n_cols] f32, row stride w.n_cols.
// y: [n_tokens, w.n_rows] f32, row stride ldy (>= w.n_rows).
// UNSUPPORTED for a weight type without a kernel; INVALID_ARGUMENT for bad shapes
// or a scratch buffer smaller than MatMulScratchBytes.
Status MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
              std::span<std::byte> scratch, ThreadPool& pool);

// One output of MatMulToSlices: the next n_rows rows of the stacked matrix go to
// y[t * ldy + i], i < n_rows.
struct OutputSlice {
  int64_t n_rows;
  float* y;
  int64_t ldy;
};

// MatMul over a matrix whose rows stack several outputs (Q, K and V; gate and up), each
// written to its own buffer, with the activations quantized once. Every row's bits equal
// what MatMul gives for it. The slices' rows must add up to w.n_rows; for Q4_0 / Q4_1 /
// Q8_0 every slice but the last must hold a multiple of 16 rows (INVALID_ARGUMENT
// otherwise, as for MatMul's errors).
Status MatMulToSlices(const WeightMatrix& w, const float* x, int64_t n_tokens,
                      std::span<const OutputSlice> slices, std::span<std::byte> scratch,
                      ThreadPool& pool);

// The SIMD level chosen at start ("avx512", "avx2", "scalar"), for logs and benchmarks.
const char* MatMulIsaName();

}  // namespace pier::kernels
