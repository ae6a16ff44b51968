// Not keeping floating-point exception flags (nothing reads them) lets GCC vectorize SiluMul's
// selects (without it the loop stays scalar: 7-8% of an AVX2 decode step); it changes no value.
// Set for the whole file so that Exp (attention_lanes.h) is compiled with the same options.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "kernels/cpu/row_ops.h"

#include <cmath>

#include "kernels/cpu/attention_lanes.h"
#include "kernels/cpu/cpu_isa.h"

namespace pier::kernels::ops {
namespace {

constexpr int kLanes = 8;

float Hsum8(const float* v) {
  const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
  return (a0 + a2) + (a1 + a3);
}

}  // namespace

float Dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i + l < n; ++l) acc[l] += a[i + l] * b[i + l];
  return Hsum8(acc);
}

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  const float sum_sq = Dot(x, x, n);
  const float scale = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void Axpy(float a, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

namespace {

// sigmoid(z) from e = exp(-|z|) <= 1: 1 / (1 + e) for z >= 0, e / (1 + e) below, so the
// exponential never overflows and attention's vectorizable Exp (x <= 0) serves.
__attribute__((always_inline)) inline float Sigmoid(float z) {
  const float e = attention::Exp(z < 0.0f ? z : -z);
  return (z >= 0.0f ? 1.0f : e) / (1.0f + e);
}

__attribute__((always_inline)) inline void SiluMulBody(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g * Sigmoid(g) * up[i];
  }
}

__attribute__((always_inline)) inline void GeluMulBody(float* gate, const float* up, int64_t n) {
  constexpr float kTwoSqrt2OverPi = 1.5957691216057308f;  // 2 * sqrt(2 / pi)
  constexpr float kCubic = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float z = kTwoSqrt2OverPi * (g + kCubic * (g * g * g));
    gate[i] = g * Sigmoid(z) * up[i];
  }
}

// The same loop compiled for AVX-512, AVX2 and the baseline, picked by ActiveIsa(); each
// element's operations are the same plain IEEE operations in every one (no contraction:
// -ffp-contract=off), so the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PIER_ROW_OP_CLONES(Name)                                                                  \
  __attribute__((target("avx512f"))) void Name##Avx512(float* gate, const float* up, int64_t n) { \
    Name##Body(gate, up, n);                                                                      \
  }                                                                                               \
  __attribute__((target("avx2"))) void Name##Avx2(float* gate, const float* up, int64_t n) {      \
    Name##Body(gate, up, n);                                                                      \
  }                                                                                               \
  void Name##Scalar(float* gate, const float* up, int64_t n) { Name##Body(gate, up, n); }
#else
#define PIER_ROW_OP_CLONES(Name)                                                          \
  void Name##Avx512(float* gate, const float* up, int64_t n) { Name##Body(gate, up, n); } \
  void Name##Avx2(float* gate, const float* up, int64_t n) { Name##Body(gate, up, n); }   \
  void Name##Scalar(float* gate, const float* up, int64_t n) { Name##Body(gate, up, n); }
#endif
PIER_ROW_OP_CLONES(SiluMul)
PIER_ROW_OP_CLONES(GeluMul)
#undef PIER_ROW_OP_CLONES

using GatedFn = void (*)(float*, const float*, int64_t);
GatedFn PickGated(GatedFn avx512, GatedFn avx2, GatedFn scalar) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      return avx2;
    case Isa::kScalar:
      break;
  }
  return scalar;
}

}  // namespace

void SiluMul(float* gate, const float* up, int64_t n) {
  PickGated(SiluMulAvx512, SiluMulAvx2, SiluMulScalar)(gate, up, n);
}

void GeluMul(float* gate, const float* up, int64_t n) {
  PickGated(GeluMulAvx512, GeluMulAvx2, GeluMulScalar)(gate, up, n);
}

void Softcap(float cap, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = attention::Softcap(y[i], cap);
}

void Scale(float a, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

void Add(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void Rope(RopeStyle style, float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          const float* cos_sin) {
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      float* p0 = style == RopeStyle::kNormal ? v + 2 * i : v + i;
      float* p1 = style == RopeStyle::kNormal ? v + 2 * i + 1 : v + i + half;
      const float x0 = *p0, x1 = *p1;
      *p0 = x0 * c - x1 * s;
      *p1 = x0 * s + x1 * c;
    }
  }
}

}  // namespace pier::kernels::ops
