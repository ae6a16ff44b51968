#include "kernels/cpu/encoder_ops.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

// The hot loops are compiled for AVX-512, AVX2 and the baseline, chosen at load by the CPU's
// features. No loop reassociates (no reductions are vectorized, no FMA is formed with
// -ffp-contract=off), so every clone gives the same bits.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define PIER_ENCODER_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PIER_ENCODER_CLONES
#endif

namespace pier::kernels {

PIER_ENCODER_CLONES
void LayerNorm(const float* x, const float* weight, const float* bias, int64_t n, float eps,
               float* y) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float squares = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - mean;
    squares += d * d;
  }
  const float inv = 1.0f / std::sqrt(squares / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * weight[i] + bias[i];
}

namespace {

// exp(x) for x <= 88 (Cephes' expf: x = k ln2 + r, |r| <= ln2/2, a degree-6 polynomial in r;
// about 1 ulp). Written with plain arithmetic and a bit cast so that loops over it vectorize
// (std::exp does not without -ffast-math); the result is a pure function of x, so a value
// never depends on the lanes it was computed in.
inline float ExpApprox(float x) {
  x = x < -87.0f ? -87.0f : x;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float k = (x * kLog2e + kRound) - kRound;
  const float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  return y * std::bit_cast<float>(bits);
}

// erf(x) for x >= 0 by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7):
// erf(x) = 1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) e^(-x^2), t = 1 / (1 + p x).
inline float ErfNonNegative(float x) {
  constexpr float p = 0.3275911f;
  constexpr float a1 = 0.254829592f, a2 = -0.284496736f, a3 = 1.421413741f, a4 = -1.453152027f,
                  a5 = 1.061405429f;
  const float t = 1.0f / (1.0f + p * x);
  const float poly = t * (a1 + t * (a2 + t * (a3 + t * (a4 + t * a5))));
  return 1.0f - poly * ExpApprox(-x * x);
}

}  // namespace

PIER_ENCODER_CLONES
void Gelu(float* x, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float a = v * kInvSqrt2;
    const float e = ErfNonNegative(std::fabs(a));
    const float erf = a < 0 ? -e : e;
    x[i] = 0.5f * v * (1.0f + erf);
  }
}

PIER_ENCODER_CLONES
void AddBias(const float* bias, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += bias[i];
}

// Lanes16 values never cross a call boundary that is not inlined, so the ABI note GCC gives for
// 64-byte vectors does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace {

// 16 floats as one value (GCC vector extension): one zmm register in the AVX-512 clone, two
// ymm or four xmm in the others; element-wise IEEE arithmetic in every case.
typedef float Lanes16 __attribute__((vector_size(64)));

[[gnu::always_inline]] inline Lanes16 Load16(const float* p) {
  Lanes16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

PIER_ENCODER_CLONES
void AttendHead(const float* q, const float* k, const float* v, int64_t n, int64_t head_dim,
                int64_t stride, float scale, float* scores, float* k_t, float* out) {
  // Every loop below works on 16 independent lanes held in registers (scores of 16 keys, or
  // 16 output columns) and reduces lanes only at the end in a fixed order, so the result is a
  // function of this one text and head alone, whatever the vector width.
  constexpr int kLanes = 16;
  const int64_t n_pad = (n + kLanes - 1) / kLanes * kLanes;
  // K transposed, padded with zero keys.
  for (int64_t d = 0; d < head_dim; ++d) {
    for (int64_t j = 0; j < n; ++j) k_t[d * n_pad + j] = k[j * stride + d];
    for (int64_t j = n; j < n_pad; ++j) k_t[d * n_pad + j] = 0.0f;
  }
  const Lanes16 neg_inf = Lanes16{} - INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const float* qi = q + i * stride;
    Lanes16 max_lanes = neg_inf;
    // Scores of 16 keys from their head_dim products in order; padding keys weigh nothing.
    const auto finish = [&](Lanes16 acc, int64_t j0) {
      acc *= scale;
      if (j0 + kLanes > n) {
        for (int64_t l = n - j0; l < kLanes; ++l) acc[l] = -INFINITY;
      }
      std::memcpy(scores + j0, &acc, sizeof(acc));
      max_lanes = acc > max_lanes ? acc : max_lanes;
    };
    int64_t j0 = 0;
    // Four blocks of keys at a time: four independent chains keep the adders busy.
    for (; j0 + 4 * kLanes <= n_pad; j0 += 4 * kLanes) {
      Lanes16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
      for (int64_t d = 0; d < head_dim; ++d) {
        const float qd = qi[d];
        const float* row = k_t + d * n_pad + j0;
        a0 += qd * Load16(row);
        a1 += qd * Load16(row + kLanes);
        a2 += qd * Load16(row + 2 * kLanes);
        a3 += qd * Load16(row + 3 * kLanes);
      }
      finish(a0, j0);
      finish(a1, j0 + kLanes);
      finish(a2, j0 + 2 * kLanes);
      finish(a3, j0 + 3 * kLanes);
    }
    for (; j0 < n_pad; j0 += kLanes) {
      Lanes16 acc = {};
      for (int64_t d = 0; d < head_dim; ++d) acc += qi[d] * Load16(k_t + d * n_pad + j0);
      finish(acc, j0);
    }
    float max_score = max_lanes[0];
    for (int l = 1; l < kLanes; ++l)
      max_score = max_lanes[l] > max_score ? max_lanes[l] : max_score;
    Lanes16 sum_lanes = {};
    for (int64_t j0 = 0; j0 < n_pad; j0 += kLanes) {
      float* row = scores + j0;
      for (int l = 0; l < kLanes; ++l) row[l] = ExpApprox(row[l] - max_score);
      sum_lanes += Load16(row);
    }
    float total = 0.0f;
    for (int l = 0; l < kLanes; ++l) total += sum_lanes[l];
    const float inv = 1.0f / total;
    float* oi = out + i * stride;
    int64_t d0 = 0;
    for (; d0 + kLanes <= head_dim; d0 += kLanes) {
      // Four partial sums over keys j = 0, 1, 2, 3 (mod 4), added in that order at the end:
      // a fixed order for this text, four independent chains for the adders.
      Lanes16 p0 = {}, p1 = {}, p2 = {}, p3 = {};
      int64_t j = 0;
      for (; j + 4 <= n; j += 4) {
        p0 += scores[j] * Load16(v + j * stride + d0);
        p1 += scores[j + 1] * Load16(v + (j + 1) * stride + d0);
        p2 += scores[j + 2] * Load16(v + (j + 2) * stride + d0);
        p3 += scores[j + 3] * Load16(v + (j + 3) * stride + d0);
      }
      for (; j < n; ++j) p0 += scores[j] * Load16(v + j * stride + d0);
      Lanes16 acc = (p0 + p1) + (p2 + p3);
      acc *= inv;
      std::memcpy(oi + d0, &acc, sizeof(acc));
    }
    for (; d0 < head_dim; ++d0) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc += scores[j] * v[j * stride + d0];
      oi[d0] = acc * inv;
    }
  }
}

}  // namespace pier::kernels
