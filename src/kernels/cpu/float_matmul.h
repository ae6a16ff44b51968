// FloatMatMul: y[t, r] = sum_k w[r, k] * x[t, k] for an f32 weight matrix, the encoder's path
// for the matrices a GGUF stores in f16 or f32 (widened to f32 once at load).
//
// Each (token, row) pair is reduced alone: 16 lanes over k in order, then the 16 lanes summed
// in one fixed order, so a token's result never depends on the batch or on how threads split
// the rows; the code is compiled for AVX-512, AVX2 and the baseline, with fused multiply-adds
// where the CPU has them, so the bits are those of the path this machine takes (the same for
// every batch on it). Tiles of 4 rows x 4 tokens keep 16 accumulators in registers. n_cols must
// be a multiple of 16.
//
// Thread-safety: pure over caller buffers; threads split the rows through `pool`.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace pier {
class ThreadPool;
}

namespace pier::kernels {

struct FloatMatrix {
  const float* data = nullptr;  // [n_rows, n_cols], row-major
  int64_t n_rows = 0;
  int64_t n_cols = 0;
};

// x: [n_tokens, w.n_cols]; y: [n_tokens, ldy] (ldy >= w.n_rows). INVALID_ARGUMENT for a shape
// that does not fit.
Status FloatMatMul(const FloatMatrix& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                   ThreadPool& pool);

}  // namespace pier::kernels
