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
// Q4_0, Q4_1 and Q8_0 weights are best packed once at load (PackWeights in
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

// The SIMD level chosen at start ("avx512", "avx2", "scalar"), for logs and benchmarks.
const char* MatMulIsaName();

}  // namespace pier::kernels
