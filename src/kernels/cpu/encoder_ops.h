// Row operations of the encoder's forward pass, each a pure function of its inputs computed
// in one fixed order (so a token's result never depends on the batch around it).
#pragma once

#include <cstdint>

namespace pier::kernels {

// y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, over n values (two passes, float).
void LayerNorm(const float* x, const float* weight, const float* bias, int64_t n, float eps,
               float* y);

// x = x * Phi(x) in place: the exact (erf) GELU that BERT uses, with an erf approximation of
// absolute error below 2e-7 (and an exp of about 1 ulp that
// vectorizes).
void Gelu(float* x, int64_t n);

// y += bias over n values.
void AddBias(const float* bias, int64_t n, float* y);

// Bidirectional attention of one head over one sequence of n tokens: for each token i,
// out[i] = softmax_j(q[i] . k[j] * scale) v[j]. q, k, v and out rows are head_dim long at
// `stride` floats apart. Scratch: `scores` and `k_t` hold AttendScratchFloats(n, head_dim)
// floats between them: scores first (n rounded up to 16), then k_t.
void AttendHead(const float* q, const float* k, const float* v, int64_t n, int64_t head_dim,
                int64_t stride, float scale, float* scores, float* k_t, float* out);

// Scratch floats one AttendHead call over n tokens needs: scores (n rounded up to 16) and K
// transposed (head_dim rows of that length).
inline int64_t AttendScratchFloats(int64_t n, int64_t head_dim) {
  return (n + 15) / 16 * 16 * (head_dim + 1);
}

}  // namespace pier::kernels
