// The canonical arithmetic of paged attention, written lane by lane.
//
// Every implementation of PagedAttention (the portable C++ loops and the AVX-512 kernel)
// evaluates exactly these operations, each an IEEE single-precision add, multiply, compare or
// integer bit operation, in the order given here, with no fused multiply-add. That is what
// makes their results the same bits on every CPU (see paged_attention.h for the whole
// sequence). The functions here are the scalar definitions; the vector kernels apply them to
// 16 lanes at once.
//
// Pure functions; thread-safe.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace pier::kernels::attention {

// Lanes of the canonical vector: partial dot products, score tiles and softmax sums are
// kept in 16 lanes.
inline constexpr int kLanes = 16;

// max(a, b) as the x86 MAXPS instruction computes it: a > b ? a : b (b when either is NaN).
inline float MaxOf(float a, float b) { return a > b ? a : b; }

// Sum of 16 lanes as a fixed halving tree: lane l + lane l+8, then l + l+4, l + l+2, l + l+1.
inline float LaneTreeSum(const float* a) {
  float b[8];
  for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
  for (int l = 0; l < 4; ++l) b[l] = b[l] + b[l + 4];
  for (int l = 0; l < 2; ++l) b[l] = b[l] + b[l + 2];
  return b[0] + b[1];
}

// Max of 16 lanes in the same tree as LaneTreeSum (MaxOf(lane l, lane l + half)).
inline float LaneTreeMax(const float* a) {
  float b[8];
  for (int l = 0; l < 8; ++l) b[l] = MaxOf(a[l], a[l + 8]);
  for (int l = 0; l < 4; ++l) b[l] = MaxOf(b[l], b[l + 4]);
  for (int l = 0; l < 2; ++l) b[l] = MaxOf(b[l], b[l + 2]);
  return MaxOf(b[0], b[1]);
}

// Constants of Exp. Inputs below kExpMin give 0 (their true values, below 1.2e-38, are
// below the smallest normal float and vanish next to a softmax's largest term, 1).
inline constexpr float kExpMin = -87.3f;
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpRound = 12582912.0f;         // 1.5 * 2^23: x + it rounds x to an integer
inline constexpr uint32_t kExpRoundBits = 0x4b400000u;  // bits of kExpRound
inline constexpr float kExpLn2Hi = 0.693359375f;        // ln 2 in 9 bits: n * it is exact
inline constexpr float kExpLn2Lo = -2.12194440e-4f;     // ln 2 - kExpLn2Hi
inline constexpr float kExpP0 = 1.9875691500e-4f;       // exp(r) - 1 - r = r^2 * P(r)
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;

// e^x for the x <= 0 of a softmax, within about 2 ulp of the true value for
// kExpMin <= x <= 0; 0 for x < kExpMin (and -inf); NaN for NaN. Cody-Waite reduction
// x = n ln2 + r, |r| <= ln2 / 2, a degree-7 polynomial for e^r, and 2^n built from its bits.
inline float Exp(float x) {
  const float xc = kExpMin > x ? kExpMin : x;  // MaxOf(kExpMin, x): keeps a NaN
  const float t = xc * kExpLog2e + kExpRound;  // n + 1.5 * 2^23, n = round(x log2 e)
  const float n = t - kExpRound;
  const float r = (xc - n * kExpLn2Hi) - n * kExpLn2Lo;
  float y = kExpP0 * r + kExpP1;
  y = y * r + kExpP2;
  y = y * r + kExpP3;
  y = y * r + kExpP4;
  y = y * r + kExpP5;
  y = y * (r * r);
  y = y + r;
  y = y + 1.0f;
  // 2^n: the low bits of t hold n; n + 127 is the biased exponent (n >= -126 here).
  const uint32_t n_bits = std::bit_cast<uint32_t>(t) - kExpRoundBits;
  const float two_n = std::bit_cast<float>((n_bits + 127u) << 23);
  const float e = y * two_n;
  return x < kExpMin ? 0.0f : e;
}

// cap * tanh(s / cap) (Gemma 2's soft-capping of attention scores and of logits): tanh(|t|) =
// (1 - e) / (1 + e) with e = Exp(-2|t|) <= 1, the sign put back. Plain IEEE operations, so the
// same bits wherever it is compiled (the kernels build without contraction).
inline float Softcap(float s, float cap) {
  const float t = s / cap;
  const float e = Exp(-2.0f * std::fabs(t));
  return cap * std::copysign((1.0f - e) / (1.0f + e), t);
}

}  // namespace pier::kernels::attention
